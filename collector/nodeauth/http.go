package nodeauth

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/errkind"
)

// The node identity endpoints (api.NodeIdentityHandlers) change who may
// report as a node, so they are for admins. Issuing a credential (Enroll) is
// left to `nbs-collector nodes enroll`, which needs the database: over HTTP
// it would hand out any node's name to whoever reaches the API.

func (a *Admin) ListIdentities(w http.ResponseWriter, r *http.Request) {
	ids, err := a.List(r.Context())
	if err != nil {
		api.WriteError(w, r, err, a.log)
		return
	}
	if ids == nil {
		ids = []NodeIdentity{}
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"mode": a.mode, "nodes": ids})
}

func (a *Admin) RevokeNode(w http.ResponseWriter, r *http.Request) {
	node := chi.URLParam(r, "node")
	if err := a.Revoke(r.Context(), node); err != nil {
		api.WriteError(w, r, err, a.log)
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"node": node, "state": "revoked"})
}

func (a *Admin) ReenrollNode(w http.ResponseWriter, r *http.Request) {
	node := chi.URLParam(r, "node")
	ok, err := a.Reenroll(r.Context(), node)
	if err == nil && !ok {
		err = errkind.Errorf(errkind.NotFound, "node %q is neither enrolled nor revoked", node)
	}
	if err != nil {
		api.WriteError(w, r, err, a.log)
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"node": node, "state": "not_enrolled"})
}

func (a *Admin) DeleteNode(w http.ResponseWriter, r *http.Request) {
	if err := a.Delete(r.Context(), chi.URLParam(r, "node")); err != nil {
		api.WriteError(w, r, err, a.log)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
