package report

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/tenant"
)

// Paging of GET /report-definitions: a page holds DefaultPage definitions
// unless ?limit= asks for up to MaxPage; next_cursor fetches the next.
const (
	DefaultPage = 100
	MaxPage     = 1000
)

// definitionsLockID serialises saving definitions, so the limits hold
// when several collectors save at once.
const definitionsLockID = 0x6e6273_07

// Definition is a saved report: its stable URL in the UI is /reports/{id}.
type Definition struct {
	ID         int64           `json:"id"`
	Name       string          `json:"name"`
	Selector   access.Selector `json:"selector"`
	Period     string          `json:"period"` // 1d, 7d, 30d, this_week, last_week, this_month, last_month or custom
	From       *time.Time      `json:"from"`
	To         *time.Time      `json:"to"`
	Targets    []string        `json:"targets"`
	Objectives []Objective     `json:"objectives"`
	// CreatedBy names the staff member who saved it: not shown to
	// customers (forViewer).
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// forViewer strips from a definition what only staff may see.
func (d Definition) forViewer(p access.Principal) Definition {
	if !p.SeesAll() {
		d.CreatedBy = ""
		// An objective of a staff-only metric does not exist for a
		// customer, here as in the report (api.View).
		view := api.ViewFor(p)
		d.Objectives = slices.DeleteFunc(slices.Clone(d.Objectives), func(o Objective) bool { return !view.Metric(o.Metric) })
	}
	return d
}

// DefinitionInput is what a client sends to create or replace one.
type DefinitionInput struct {
	Name       string          `json:"name"`
	Selector   access.Selector `json:"selector"`
	Period     string          `json:"period"`
	From       *time.Time      `json:"from"`
	To         *time.Time      `json:"to"`
	Targets    []string        `json:"targets"`
	Objectives []Objective     `json:"objectives"`
}

var periods = map[string]time.Duration{"1d": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

// Validate checks a definition, naming every problem.
func (in DefinitionInput) Validate() error {
	var errs []error
	if strings.TrimSpace(in.Name) == "" || len(in.Name) > 200 {
		errs = append(errs, errors.New("name must be 1 to 200 bytes"))
	}
	if err := in.Selector.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch in.Period {
	case "1d", "7d", "30d", "this_week", "last_week", "this_month", "last_month":
		if in.From != nil || in.To != nil {
			errs = append(errs, fmt.Errorf("from and to are for period \"custom\" only"))
		}
	case "custom":
		switch {
		case in.From == nil || in.To == nil:
			errs = append(errs, errors.New("period \"custom\" needs from and to"))
		case !in.From.Before(*in.To):
			errs = append(errs, errors.New("from must be before to"))
		case in.To.Sub(*in.From) > MaxPeriod:
			errs = append(errs, fmt.Errorf("period is longer than %d days", int(MaxPeriod.Hours()/24)))
		}
	default:
		errs = append(errs, fmt.Errorf("period %q must be 1d, 7d, 30d, this_week, last_week, this_month, last_month or custom", in.Period))
	}
	if err := validTargets(in.Targets); err != nil {
		errs = append(errs, err)
	}
	if len(in.Objectives) > MaxObjectives {
		errs = append(errs, fmt.Errorf("%d objectives, at most %d", len(in.Objectives), MaxObjectives))
	} else {
		for _, o := range in.Objectives {
			if err := o.Validate(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return errkind.Errorf(errkind.Invalid, "report definition: %w", err)
	}
	return nil
}

func validTargets(ts []string) error {
	if len(ts) > MaxTargets {
		return fmt.Errorf("%d targets, at most %d", len(ts), MaxTargets)
	}
	for _, t := range ts {
		if t == "" || len(t) > 128 || strings.ContainsAny(t, "/,\x00") {
			return fmt.Errorf("target %q must be 1 to 128 bytes without / , or NUL", t)
		}
	}
	return nil
}

// span is the period a definition covers when run at now.
func (d Definition) span(now time.Time) (time.Time, time.Time) {
	if d.Period == "custom" && d.From != nil && d.To != nil {
		return *d.From, *d.To
	}
	if from, to, ok := Calendar(d.Period, now); ok {
		return from, to
	}
	return now.Add(-periods[d.Period]), now
}

// Calendar is a calendar period in UTC as of now: this_week (from Monday
// 00:00 to now), last_week (Monday to Monday), this_month (from the 1st to
// now) and last_month (the 1st to the 1st). ok is false for other names.
func Calendar(name string, now time.Time) (from, to time.Time, ok bool) {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	monday := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	switch name {
	case "this_week":
		return monday, now, true
	case "last_week":
		return monday.AddDate(0, 0, -7), monday, true
	case "this_month":
		return month, now, true
	case "last_month":
		return month.AddDate(0, -1, 0), month, true
	}
	return time.Time{}, time.Time{}, false
}

type repo struct {
	pool   *pgxpool.Pool
	limits Config
}

// Cursor is where a page of definitions continues: after this name and id,
// in the list's order. It travels as an opaque token (String).
type Cursor struct {
	Name string `json:"n"`
	ID   int64  `json:"i"`
}

// String encodes the cursor for next_cursor.
func (c Cursor) String() string {
	b, _ := json.Marshal(c) // a string and an int always encode
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseCursor decodes what String made.
func ParseCursor(s string) (Cursor, error) {
	var c Cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 1024 || json.Unmarshal(b, &c) != nil || c.ID < 1 {
		return Cursor{}, invalid("cursor %s is not one this API gave (take next_cursor of the previous page as it is)", api.Quote(s))
	}
	return c, nil
}

// Page is one page of a list of definitions; Next is nil after the last.
type Page struct {
	Definitions []Definition
	Next        *Cursor
}

func scanDefinition(row pgx.Row) (Definition, error) {
	var d Definition
	var body []byte
	if err := row.Scan(&d.ID, &body, &d.CreatedBy, &d.CreatedAt); err != nil {
		return d, err
	}
	var in DefinitionInput
	if err := json.Unmarshal(body, &in); err != nil {
		return d, fmt.Errorf("decode report definition %d: %w", d.ID, err)
	}
	d.Name, d.Selector, d.Period, d.From, d.To, d.Targets, d.Objectives = in.Name, in.Selector, in.Period, in.From, in.To, in.Targets, in.Objectives
	if d.Selector == nil {
		d.Selector = access.Selector{}
	}
	if d.Targets == nil {
		d.Targets = []string{}
	}
	if d.Objectives == nil {
		d.Objectives = []Objective{}
	}
	return d, nil
}

const defColumns = `id, body, created_by, created_at`

// visible is the definitions a principal may see: a customer only those
// whose selector contains its own (so they cover no node outside it).
func visible(p access.Principal, argN int) (string, []any) {
	return p.LabelClause("selector", argN)
}

// list reads a page of the definitions p sees, by name then id, after the
// cursor (nil: from the start).
func (r repo) list(ctx context.Context, p access.Principal, limit int, after *Cursor) (Page, error) {
	clause, args := visible(p, 4)
	var name *string
	var id int64
	if after != nil {
		name, id = &after.Name, after.ID
	}
	// One more than the page tells whether there is a next one.
	rows, err := r.pool.Query(ctx, `SELECT `+defColumns+` FROM report_definitions
		WHERE ($1::text IS NULL OR (name, id) > ($1, $2)) AND `+clause+`
		ORDER BY name, id LIMIT $3`, append([]any{name, id, limit + 1}, args...)...)
	if err != nil {
		return Page{}, fmt.Errorf("list report definitions: %w", err)
	}
	defs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Definition, error) { return scanDefinition(row) })
	if err != nil {
		return Page{}, fmt.Errorf("list report definitions: %w", err)
	}
	page := Page{Definitions: defs}
	if len(defs) > limit {
		last := defs[limit-1]
		page.Definitions, page.Next = defs[:limit], &Cursor{Name: last.Name, ID: last.ID}
	}
	return page, nil
}

// checkLimits refuses a definition with selector sel that would pass a
// limit; self is the definition being replaced (0: a new one). The caller
// holds definitionsLockID. The per-tenant count is by the tenant the
// selector names, not the whole selector: customer=acme,rack=r1 and
// customer=acme,rack=r2 are both acme's.
func (r repo) checkLimits(ctx context.Context, tx pgx.Tx, sel access.Selector, self int64) error {
	key := r.limits.Tenant
	if key == "" {
		key = tenant.DefaultKey
	}
	t := key.Of(sel)
	var all, same int
	if err := tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE coalesce(selector->>$1, '') = $2 AND id <> $3)
		FROM report_definitions`, key.String(), t, self).Scan(&all, &same); err != nil {
		return fmt.Errorf("count report definitions: %w", err)
	}
	if self == 0 && all >= r.limits.MaxDefinitions {
		return errkind.Errorf(errkind.Conflict, "%d saved report definitions is the limit (--reports.max-definitions); delete some first", r.limits.MaxDefinitions)
	}
	if same >= r.limits.MaxDefinitionsPerTenant {
		whose := fmt.Sprintf("of tenant %s=%s", key, t)
		if t == "" {
			whose = fmt.Sprintf("naming no tenant (no %s label in their selector)", key)
		}
		return errkind.Errorf(errkind.Conflict, "%d saved report definitions %s is the limit for one tenant, whatever other labels their selectors name (--reports.max-definitions-per-tenant); delete some of them first",
			r.limits.MaxDefinitionsPerTenant, whose)
	}
	return nil
}

func lockDefinitions(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, definitionsLockID); err != nil {
		return fmt.Errorf("lock report definitions: %w", err)
	}
	return nil
}

func notFound(id int64) error {
	return errkind.Errorf(errkind.NotFound, "report definition %d: not found", id)
}

func (r repo) get(ctx context.Context, p access.Principal, id int64) (Definition, error) {
	clause, args := visible(p, 2)
	d, err := scanDefinition(r.pool.QueryRow(ctx, `SELECT `+defColumns+` FROM report_definitions WHERE id = $1 AND `+clause, append([]any{id}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, notFound(id)
	}
	if err != nil {
		return d, fmt.Errorf("read report definition %d: %w", id, err)
	}
	return d, nil
}

func encode(in DefinitionInput) ([]byte, []byte, error) {
	if in.Selector == nil {
		in.Selector = access.Selector{}
	}
	body, err := json.Marshal(in)
	if err != nil {
		return nil, nil, fmt.Errorf("encode report definition: %w", err)
	}
	return body, []byte(in.Selector.JSON()), nil
}

func (r repo) create(ctx context.Context, p access.Principal, in DefinitionInput) (Definition, error) {
	body, sel, err := encode(in)
	if err != nil {
		return Definition{}, err
	}
	var d Definition
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := lockDefinitions(ctx, tx); err != nil {
			return err
		}
		if err := r.checkLimits(ctx, tx, in.Selector, 0); err != nil {
			return err
		}
		d, err = scanDefinition(tx.QueryRow(ctx, `INSERT INTO report_definitions (name, selector, body, created_by)
			VALUES ($1, $2, $3, $4) RETURNING `+defColumns, in.Name, sel, body, p.Name))
		if err != nil {
			return err
		}
		return access.Audit(ctx, tx, access.Entry{Action: "create", ObjectKind: "report_definition", ObjectID: strconv.FormatInt(d.ID, 10), New: d})
	})
	if err != nil {
		return d, fmt.Errorf("create report definition: %w", err)
	}
	return d, nil
}

func (r repo) update(ctx context.Context, id int64, in DefinitionInput) (Definition, error) {
	body, sel, err := encode(in)
	if err != nil {
		return Definition{}, err
	}
	var d Definition
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := lockDefinitions(ctx, tx); err != nil {
			return err
		}
		old, err := scanDefinition(tx.QueryRow(ctx, `SELECT `+defColumns+` FROM report_definitions WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound(id)
		}
		if err != nil {
			return err
		}
		// Moving it to another tenant counts against that one's limit.
		if err := r.checkLimits(ctx, tx, in.Selector, id); err != nil {
			return err
		}
		d, err = scanDefinition(tx.QueryRow(ctx, `UPDATE report_definitions SET name = $2, selector = $3, body = $4
			WHERE id = $1 RETURNING `+defColumns, id, in.Name, sel, body))
		if err != nil {
			return err
		}
		return access.Audit(ctx, tx, access.Entry{Action: "update", ObjectKind: "report_definition", ObjectID: strconv.FormatInt(id, 10), Old: old, New: d})
	})
	if err != nil {
		return d, fmt.Errorf("update report definition %d: %w", id, err)
	}
	return d, nil
}

func (r repo) delete(ctx context.Context, id int64) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		old, err := scanDefinition(tx.QueryRow(ctx, `DELETE FROM report_definitions WHERE id = $1 RETURNING `+defColumns, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound(id)
		}
		if err != nil {
			return fmt.Errorf("delete report definition %d: %w", id, err)
		}
		return access.Audit(ctx, tx, access.Entry{Action: "delete", ObjectKind: "report_definition", ObjectID: strconv.FormatInt(id, 10), Old: old})
	})
}
