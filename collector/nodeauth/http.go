package nodeauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/api"
)

// Routes adds the node identity endpoints under /api/v1. They change who may
// report as a node, so they are for admins once the API has roles.
func (a *Admin) Routes(r chi.Router) {
	r.Get("/node-identities", a.listHTTP)
	r.Post("/nodes/{node}/enroll", a.enrollHTTP)
	r.Post("/nodes/{node}/revoke", a.revokeHTTP)
	r.Post("/nodes/{node}/reenroll", a.reenrollHTTP)
	r.Delete("/nodes/{node}", a.deleteHTTP)
}

// httpError maps Admin's errors onto the API's classes.
func (a *Admin) httpError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrInvalidName):
		err = api.BadRequest("%v", err)
	case errors.Is(err, ErrAlreadyEnrolled):
		err = fmt.Errorf("%w: %v", api.ErrConflict, err)
	}
	api.WriteError(w, r, err, a.log)
}

func (a *Admin) listHTTP(w http.ResponseWriter, r *http.Request) {
	ids, err := a.List(r.Context())
	if err != nil {
		a.httpError(w, r, err)
		return
	}
	if ids == nil {
		ids = []NodeIdentity{}
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"mode": a.mode, "nodes": ids})
}

func (a *Admin) enrollHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Replace bool `json:"replace"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if !errors.As(err, &mbe) {
			err = api.BadRequest("request body: %v (want {\"replace\": true} or nothing)", err)
		}
		a.httpError(w, r, err)
		return
	}
	node := chi.URLParam(r, "node")
	cred, err := a.Enroll(r.Context(), node, req.Replace)
	if err != nil {
		a.httpError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusCreated, map[string]string{"node": node, "credential": cred,
		"note": "shown once: write it to the node's --node.credential-file (mode 0600)"})
}

func (a *Admin) revokeHTTP(w http.ResponseWriter, r *http.Request) {
	node := chi.URLParam(r, "node")
	if err := a.Revoke(r.Context(), node); err != nil {
		a.httpError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"node": node, "state": "revoked"})
}

func (a *Admin) reenrollHTTP(w http.ResponseWriter, r *http.Request) {
	node := chi.URLParam(r, "node")
	ok, err := a.Reenroll(r.Context(), node)
	if err == nil && !ok {
		err = fmt.Errorf("node %q is neither enrolled nor revoked: %w", node, api.ErrNotFound)
	}
	if err != nil {
		a.httpError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"node": node, "state": "not_enrolled"})
}

func (a *Admin) deleteHTTP(w http.ResponseWriter, r *http.Request) {
	if err := a.Delete(r.Context(), chi.URLParam(r, "node")); err != nil {
		a.httpError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
