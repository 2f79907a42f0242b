package alert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/alert/notify/alertmanager"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
)

// Acknowledging and silencing. An acknowledgement is NBS's own record that
// someone is on an alert (Alertmanager has no such thing). A silence stops
// notifications of an alert's identity until it ends: where Alertmanager is
// the receiver it is an Alertmanager silence on the alert's exact labels
// (POST /api/v2/silences; expiring it is DELETE /api/v2/silence/{id}), and
// NBS keeps the record and stops sending the webhook, which has no silences
// of its own. Every change is audited.

const (
	// maxComment bounds an acknowledgement's or a silence's comment.
	maxComment = 1000
	// minSilence and maxSilence bound how long a silence lasts.
	minSilence = time.Minute
	maxSilence = 30 * 24 * time.Hour
)

// AckInput is POST /alerts/{id}/acknowledge.
type AckInput struct {
	Comment string `json:"comment"`
}

// SilenceInput is POST /alerts/{id}/silence.
type SilenceInput struct {
	// DurationSeconds: from 60 (1 minute) to 2592000 (30 days).
	DurationSeconds int    `json:"duration_seconds"`
	Comment         string `json:"comment"`
}

func checkComment(c string) error {
	if len(c) > maxComment || !utf8.ValidString(c) {
		return errkind.Errorf(errkind.Invalid, "comment must be UTF-8 text of at most %d bytes", maxComment)
	}
	return nil
}

// actor names the caller in acknowledgements, silences and Alertmanager's
// createdBy.
func actor(p access.Principal) string {
	if p.Name == "" {
		return "nbs"
	}
	return p.Name
}

// Acknowledge serves POST /alerts/{id}/acknowledge.
func (s *Service) Acknowledge(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert")
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	var in AckInput
	if err := httpjson.Decode(r, &in); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if err := checkComment(in.Comment); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if err := s.repo.acknowledge(r.Context(), id, actor(access.FromContext(r.Context())), in.Comment, true); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	s.log.Info("alert acknowledged", "id", id, "by", actor(access.FromContext(r.Context())))
	s.writeAlert(w, r, id)
}

// Unacknowledge serves DELETE /alerts/{id}/acknowledge.
func (s *Service) Unacknowledge(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert")
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if err := s.repo.acknowledge(r.Context(), id, actor(access.FromContext(r.Context())), "", false); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	s.writeAlert(w, r, id)
}

// Silence serves POST /alerts/{id}/silence.
func (s *Service) Silence(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert")
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	var in SilenceInput
	if err := httpjson.Decode(r, &in); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	d := time.Duration(in.DurationSeconds) * time.Second
	if d < minSilence || d > maxSilence {
		httpjson.WriteError(w, r, errkind.Errorf(errkind.Invalid, "duration_seconds %d must be from %d (1 minute) to %d (30 days)",
			in.DurationSeconds, int(minSilence.Seconds()), int(maxSilence.Seconds())), s.log)
		return
	}
	if err := checkComment(in.Comment); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	p := access.FromContext(r.Context())
	inst, err := s.visibleAlert(r.Context(), id, p)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if err := s.silence(r.Context(), inst, d, actor(p), in.Comment); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	s.writeAlert(w, r, id)
}

// silence creates the Alertmanager silences first, then the record: a
// silence Alertmanager refused is not recorded (on-call must know it did
// not take), and one recorded without all of its Alertmanager copies is
// undone.
func (s *Service) silence(ctx context.Context, inst storedInstance, d time.Duration, by, comment string) error {
	matchers := inst.Labels
	if len(matchers) == 0 {
		// A pending alert has no frozen labels yet; silence what will be frozen.
		matchers = map[string]string{"alertname": inst.RuleName}
		if inst.Node != "" {
			matchers["node"] = inst.Node
		}
	}
	now := time.Now()
	sil := alertmanager.Silence{Matchers: alertmanager.EqualMatchers(matchers), StartsAt: now, EndsAt: now.Add(d),
		CreatedBy: by, Comment: comment}
	if sil.Comment == "" {
		sil.Comment = fmt.Sprintf("silenced from NBS (alert %d)", inst.ID)
	}
	amIDs := map[string]string{}
	for _, u := range s.cfg.AlertmanagerURLs {
		silenceID, err := s.am.CreateSilence(ctx, u, sil)
		if err != nil {
			_ = s.expireAM(ctx, amSilences(amIDs)) // logged there
			return errkind.Errorf(errkind.Unavailable, "alertmanager did not take the silence: %v", err)
		}
		amIDs[u] = silenceID
	}
	if err := s.repo.createSilence(ctx, inst, matchers, now, now.Add(d), by, comment, amIDs); err != nil {
		_ = s.expireAM(ctx, amSilences(amIDs)) // logged there
		return err
	}
	s.log.Info("alert silenced", "id", inst.ID, "by", by, "until", now.Add(d), "alertmanager", len(amIDs))
	return nil
}

// amSilence is one Alertmanager's copy of a silence.
type amSilence struct{ url, id string }

func amSilences(ids map[string]string) []amSilence {
	out := make([]amSilence, 0, len(ids))
	for u, id := range ids {
		out = append(out, amSilence{u, id})
	}
	return out
}

func (s *Service) expireAM(ctx context.Context, silences []amSilence) error {
	var errs []error
	for _, sil := range silences {
		u, id := sil.url, sil.id
		if err := s.am.ExpireSilence(ctx, u, id); err != nil {
			s.log.Warn("expire an alertmanager silence", "url", u, "silence", id, "err", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Unsilence serves DELETE /alerts/{id}/silence: every active silence of the
// alert's identity ends now, in Alertmanager too.
func (s *Service) Unsilence(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert")
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	p := access.FromContext(r.Context())
	inst, err := s.visibleAlert(r.Context(), id, p)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	ended, err := s.repo.expireSilences(r.Context(), inst, actor(p))
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if err := s.expireAM(r.Context(), ended); err != nil {
		httpjson.WriteError(w, r, errkind.Errorf(errkind.Unavailable, "the silence ended in NBS, but alertmanager did not expire it: %v", err), s.log)
		return
	}
	s.log.Info("alert silence expired", "id", id, "by", actor(p))
	s.writeAlert(w, r, id)
}

// writeAlert answers with the alert as GET /alerts/{id} would.
func (s *Service) writeAlert(w http.ResponseWriter, r *http.Request, id int64) {
	v, err := s.detail(r.Context(), id, access.FromContext(r.Context()))
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	httpjson.Write(w, http.StatusOK, v)
}

// ackRecord is what the audit log keeps of an acknowledgement.
type ackRecord struct {
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	Comment string    `json:"comment,omitempty"`
}

// acknowledge sets (or with on false clears) an open alert's
// acknowledgement, audited in the same transaction.
func (p repo) acknowledge(ctx context.Context, id int64, by, comment string, on bool) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var state string
		var at *time.Time
		var oldBy, oldComment string
		err := tx.QueryRow(ctx, `SELECT state, acknowledged_at, acknowledged_by, ack_comment FROM alert_instances WHERE id = $1 FOR UPDATE`,
			id).Scan(&state, &at, &oldBy, &oldComment)
		if errors.Is(err, pgx.ErrNoRows) {
			return errkind.Errorf(errkind.NotFound, "alert %d: not found", id)
		}
		if err != nil {
			return err
		}
		if on && state == string(Resolved) {
			return errkind.Errorf(errkind.Conflict, "alert %d is resolved: there is nothing to acknowledge", id)
		}
		var old, neu any
		if at != nil {
			old = ackRecord{By: oldBy, At: *at, Comment: oldComment}
		}
		if on {
			now := time.Now().UTC()
			neu = ackRecord{By: by, At: now, Comment: comment}
			_, err = tx.Exec(ctx, `UPDATE alert_instances SET acknowledged_at = $2, acknowledged_by = $3, ack_comment = $4 WHERE id = $1`,
				id, now, by, comment)
		} else {
			_, err = tx.Exec(ctx, `UPDATE alert_instances SET acknowledged_at = NULL, acknowledged_by = '', ack_comment = '' WHERE id = $1`, id)
		}
		if err != nil {
			return err
		}
		action := "acknowledge"
		if !on {
			action = "unacknowledge"
		}
		return access.Audit(ctx, tx, access.Entry{Action: action, ObjectKind: "alert", ObjectID: strconv.FormatInt(id, 10), Old: old, New: neu})
	})
	if err != nil {
		return fmt.Errorf("acknowledge alert %d: %w", id, err)
	}
	return nil
}

// silenceRecord is what the audit log keeps of a silence.
type silenceRecord struct {
	ID           int64             `json:"id"`
	Fingerprint  string            `json:"fingerprint"`
	Matchers     map[string]string `json:"matchers"`
	StartsAt     time.Time         `json:"starts_at"`
	EndsAt       time.Time         `json:"ends_at"`
	CreatedBy    string            `json:"created_by"`
	Comment      string            `json:"comment,omitempty"`
	Alertmanager map[string]string `json:"alertmanager,omitempty"`
}

func (p repo) createSilence(ctx context.Context, inst storedInstance, matchers map[string]string, start, end time.Time,
	by, comment string, amIDs map[string]string) error {
	m, err := json.Marshal(matchers)
	if err != nil {
		return fmt.Errorf("encode silence matchers: %w", err)
	}
	ids, err := json.Marshal(amIDs)
	if err != nil {
		return fmt.Errorf("encode alertmanager silence ids: %w", err)
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		rec := silenceRecord{Fingerprint: inst.Fingerprint, Matchers: matchers, StartsAt: start.UTC(), EndsAt: end.UTC(),
			CreatedBy: by, Comment: comment, Alertmanager: amIDs}
		if err := tx.QueryRow(ctx, `INSERT INTO alert_silences (fingerprint, instance_id, matchers, starts_at, ends_at, created_by, comment, am_ids)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`, inst.Fingerprint, inst.ID, m, start, end, by, comment, ids).Scan(&rec.ID); err != nil {
			return err
		}
		return access.Audit(ctx, tx, access.Entry{Action: "silence", ObjectKind: "alert", ObjectID: strconv.FormatInt(inst.ID, 10), New: rec})
	})
	if err != nil {
		return fmt.Errorf("silence alert %d: %w", inst.ID, err)
	}
	return nil
}

// expireSilences ends the active silences of an alert's identity now and
// returns their Alertmanager copies (URL -> id) to expire there.
func (p repo) expireSilences(ctx context.Context, inst storedInstance, by string) ([]amSilence, error) {
	var out []amSilence
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE alert_silences SET ends_at = greatest(now(), starts_at + interval '1 microsecond'), expired_by = $2
			WHERE fingerprint = $1 AND ends_at > now() RETURNING id, ends_at, am_ids`, inst.Fingerprint, by)
		if err != nil {
			return err
		}
		type expired struct {
			ID     int64     `json:"id"`
			EndsAt time.Time `json:"ends_at"`
		}
		var ended []expired
		for rows.Next() {
			var e expired
			var ids []byte
			if err := rows.Scan(&e.ID, &e.EndsAt, &ids); err != nil {
				rows.Close()
				return err
			}
			am := map[string]string{}
			if err := json.Unmarshal(ids, &am); err != nil {
				rows.Close()
				return fmt.Errorf("decode alertmanager ids of silence %d: %w", e.ID, err)
			}
			out = append(out, amSilences(am)...)
			ended = append(ended, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ended) == 0 {
			return errkind.Errorf(errkind.Conflict, "alert %d is not silenced", inst.ID)
		}
		return access.Audit(ctx, tx, access.Entry{Action: "unsilence", ObjectKind: "alert", ObjectID: strconv.FormatInt(inst.ID, 10), Old: ended})
	})
	if err != nil {
		return nil, fmt.Errorf("expire the silence of alert %d: %w", inst.ID, err)
	}
	return out, nil
}
