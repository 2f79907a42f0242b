package nodeauth

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/api"
)

// Routes adds the node identity endpoints under /api/v1. They change who may
// report as a node, so they are for admins once the API has roles. Issuing
// a credential (Enroll) is left to `nbs-collector nodes enroll`, which needs
// the database: over HTTP it would hand out any node's name to whoever
// reaches the API.
func (a *Admin) Routes(r chi.Router) {
	r.Get("/node-identities", a.listHTTP)
	r.Post("/nodes/{node}/revoke", a.revokeHTTP)
	r.Post("/nodes/{node}/reenroll", a.reenrollHTTP)
	r.Delete("/nodes/{node}", a.deleteHTTP)
}

// httpError maps Admin's errors onto the API's classes.
func (a *Admin) httpError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrInvalidName):
		err = api.BadRequest("%v", err)
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
