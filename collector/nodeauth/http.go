package nodeauth

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
)

// The node identity endpoints (api.NodeIdentityHandlers) change who may
// report as a node, so they are for admins. Issuing a credential (Enroll) is
// left to `nbs-collector nodes enroll`, which needs the database: over HTTP
// it would hand out any node's name to whoever reaches the API.

func (a *Admin) ListIdentities(w http.ResponseWriter, r *http.Request) {
	ids, err := a.List(r.Context())
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	if ids == nil {
		ids = []NodeIdentity{}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"mode": a.mode, "tenant_label": a.tenant, "nodes": ids})
}

func (a *Admin) RevokeNode(w http.ResponseWriter, r *http.Request) {
	node := chi.URLParam(r, "node")
	if err := a.Revoke(r.Context(), node); err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"node": node, "state": "revoked"})
}

func (a *Admin) ReenrollNode(w http.ResponseWriter, r *http.Request) {
	node := chi.URLParam(r, "node")
	ok, err := a.Reenroll(r.Context(), node)
	if err == nil && !ok {
		err = errkind.Errorf(errkind.NotFound, "node %q is neither enrolled nor revoked", node)
	}
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"node": node, "state": "not_enrolled"})
}

func (a *Admin) DeleteNode(w http.ResponseWriter, r *http.Request) {
	if err := a.Delete(r.Context(), chi.URLParam(r, "node")); err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// LabelNode binds labels to a node (PUT /nodes/{node}/labels with
// {"labels": {"customer": "globex"}}; {} unbinds them): its tenant among
// them, so a move between tenants is an admin's, audited.
func (a *Admin) LabelNode(w http.ResponseWriter, r *http.Request) {
	node := chi.URLParam(r, "node")
	var in struct {
		Labels map[string]string `json:"labels"`
	}
	if err := httpjson.Decode(r, &in); err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	if in.Labels == nil {
		httpjson.WriteError(w, r, errkind.Errorf(errkind.Invalid, `the body needs "labels": an object of label=value ({} unbinds every label)`), a.log)
		return
	}
	if err := a.Label(r.Context(), node, in.Labels); err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"node": node, "bound_labels": in.Labels, "tenant": a.tenant.Of(in.Labels)})
}

// ListBootstrapTokenInfos answers GET /node-bootstrap-tokens.
func (a *Admin) ListBootstrapTokenInfos(w http.ResponseWriter, r *http.Request) {
	ts, err := a.ListBootstrapTokens(r.Context())
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	if ts == nil {
		ts = []BootstrapTokenInfo{}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"bootstrap_tokens": ts})
}

// CreateBootstrapTokenHTTP answers POST /node-bootstrap-tokens with the
// token, shown once.
func (a *Admin) CreateBootstrapTokenHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct {
		NewBootstrapToken
		ExpiresIn string `json:"expires_in"`
	}
	if err := httpjson.Decode(r, &in); err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	if in.ExpiresIn != "" {
		ttl, err := access.ParseTTL(in.ExpiresIn)
		if err != nil {
			httpjson.WriteError(w, r, errkind.Errorf(errkind.Invalid, "expires_in: %v", err), a.log)
			return
		}
		in.TTL = ttl
	}
	token, info, err := a.CreateBootstrapToken(r.Context(), in.NewBootstrapToken)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	httpjson.Write(w, http.StatusCreated, map[string]any{"token": token, "bootstrap_token": info})
}

// RevokeBootstrapTokenHTTP answers DELETE /node-bootstrap-tokens/{name}.
func (a *Admin) RevokeBootstrapTokenHTTP(w http.ResponseWriter, r *http.Request) {
	if err := a.RevokeBootstrapToken(r.Context(), chi.URLParam(r, "name")); err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
