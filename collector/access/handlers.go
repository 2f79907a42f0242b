package access

// The handlers of the login page, the UI's whoami, tokens and the audit
// log; collector/api's route table (AccessHandlers) says who may call each.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/httpjson"
)

// maxAccessBody bounds the bodies of these routes: a token, a name, a
// selector.
const maxAccessBody = 16 << 10

// WhoAmI is what the UI learns about its user: who, which role (to show
// only what the role allows), for customers the scope, and until when.
type WhoAmI struct {
	Principal
	Mode Mode `json:"mode"`
}

// HandleLogin is POST /login {"token": "nbs_…"}: it sets the session
// cookie and answers like whoami.
func (a *Access) HandleLogin(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	if a.cfg.Mode == ModeNone {
		httpjson.Write(w, http.StatusOK, WhoAmI{Principal: Principal{Name: "anonymous", Role: RoleAdmin, Via: ViaNone}, Mode: a.cfg.Mode})
		return
	}
	if a.signInBlocked(w, r) {
		return
	}
	s, err := a.Login(r.Context(), strings.TrimSpace(body.Token), addrString(a.client(r)))
	if errors.Is(err, ErrUnauthenticated) {
		a.signInFailed(r)
	}
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	a.setSessionCookie(w, r, s)
	httpjson.Write(w, http.StatusOK, WhoAmI{Principal: s.Principal, Mode: a.cfg.Mode})
}

// HandleLogout is POST /logout: it ends the session and clears the cookie.
func (a *Access) HandleLogout(w http.ResponseWriter, r *http.Request) {
	if id, ok := a.sessionCookie(r); ok {
		if err := a.Logout(r.Context(), id); err != nil {
			httpjson.WriteError(w, r, err, a.log)
			return
		}
	}
	a.clearSessionCookies(w, r)
	w.WriteHeader(http.StatusNoContent)
}

// HandleWhoAmI is GET /whoami.
func (a *Access) HandleWhoAmI(w http.ResponseWriter, r *http.Request) {
	httpjson.Write(w, http.StatusOK, WhoAmI{Principal: FromContext(r.Context()), Mode: a.cfg.Mode})
}

// HandleListTokens is GET /tokens: every token, without secrets.
func (a *Access) HandleListTokens(w http.ResponseWriter, r *http.Request) {
	ts, err := a.Tokens(r.Context())
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	if ts == nil {
		ts = []Token{}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"tokens": ts})
}

// CreateTokenRequest is the body of POST /tokens.
type CreateTokenRequest struct {
	Name     string   `json:"name"`
	Role     Role     `json:"role"`
	Selector Selector `json:"selector,omitempty"`
	// ExpiresIn is a duration such as 720h or 90d; empty is the default.
	ExpiresIn string `json:"expires_in,omitempty"`
}

// CreatedToken is the answer to POST /tokens: the secret, this once.
type CreatedToken struct {
	Token string `json:"token"`
	Info  Token  `json:"info"`
}

// HandleCreateToken is POST /tokens.
func (a *Access) HandleCreateToken(w http.ResponseWriter, r *http.Request) {
	var req CreateTokenRequest
	if err := decodeJSON(w, r, &req); err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	n := NewToken{Name: req.Name, Role: req.Role, Selector: req.Selector}
	if req.ExpiresIn != "" {
		ttl, err := ParseTTL(req.ExpiresIn)
		if err != nil {
			httpjson.WriteError(w, r, invalid("expires_in: %v", err), a.log)
			return
		}
		n.TTL = ttl
	}
	secret, t, err := a.CreateToken(r.Context(), n)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	httpjson.Write(w, http.StatusCreated, CreatedToken{Token: secret, Info: t})
}

// HandleRevokeToken is DELETE /tokens/{id}; it answers the revoked token.
func (a *Access) HandleRevokeToken(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id < 1 {
		httpjson.WriteError(w, r, invalid("token id %q is not a positive number", chi.URLParam(r, "id")), a.log)
		return
	}
	t, err := a.RevokeToken(r.Context(), id)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	httpjson.Write(w, http.StatusOK, t)
}

// HandleAudit is GET /audit?object_kind=&object_id=&since=&until=&before=&limit=
// (times as RFC 3339 or Unix milliseconds), newest first.
func (a *Access) HandleAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := AuditQuery{ObjectKind: q.Get("object_kind"), ObjectID: q.Get("object_id")}
	var errs []error
	var err error
	if s := q.Get("since"); s != "" {
		if f.Since, err = parseTime(s); err != nil {
			errs = append(errs, fmt.Errorf("since: %w", err))
		}
	}
	if s := q.Get("until"); s != "" {
		if f.Until, err = parseTime(s); err != nil {
			errs = append(errs, fmt.Errorf("until: %w", err))
		}
	}
	if s := q.Get("limit"); s != "" {
		if f.Limit, err = strconv.Atoi(s); err != nil || f.Limit < 1 {
			errs = append(errs, fmt.Errorf("limit %q must be from 1 to %d", s, MaxAuditLimit))
		}
	}
	if s := q.Get("before"); s != "" {
		if f.BeforeID, err = strconv.ParseInt(s, 10, 64); err != nil || f.BeforeID < 1 {
			errs = append(errs, fmt.Errorf("before %q must be an entry id", s))
		}
	}
	if err := errors.Join(errs...); err != nil {
		httpjson.WriteError(w, r, invalid("%v", err), a.log)
		return
	}
	entries, err := a.AuditLog(r.Context(), f)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	if entries == nil {
		entries = []AuditRecord{}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"entries": entries})
}

func parseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, fmt.Errorf("%q is neither RFC 3339 (2026-01-02T15:04:05Z) nor Unix milliseconds", s)
	}
	return t, nil
}

// decodeJSON reads one JSON object of at most maxAccessBody bytes with no
// unknown fields.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAccessBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return invalid("body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("body: one JSON object expected")
	}
	return nil
}
