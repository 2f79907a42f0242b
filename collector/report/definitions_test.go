package report_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

var operator = access.Principal{Name: "olga", Role: access.RoleOperator, Via: access.ViaToken}

func definitionService(t *testing.T) *report.Service {
	t.Helper()
	st, err := store.Open(context.Background(), pgcluster.Database(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return report.New(st, st.Pool(), slog.New(slog.DiscardHandler))
}

// call runs one of the service's handlers as p, with the route's {id}.
func call(t *testing.T, h http.HandlerFunc, p access.Principal, method, target, id, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	rctx := chi.NewRouteContext()
	rctx.URLParams.Add("id", id)
	ctx := context.WithValue(access.WithPrincipal(r.Context(), p), chi.RouteCtxKey, rctx)
	w := httptest.NewRecorder()
	h(w, r.WithContext(ctx))
	return w.Code, w.Body.String()
}

func create(t *testing.T, s *report.Service, name, selector string) (int, string) {
	t.Helper()
	return call(t, s.CreateDefinition, operator, "POST", "/report-definitions", "",
		fmt.Sprintf(`{"name":%q,"selector":%s,"period":"7d"}`, name, selector))
}

// listAll pages through GET /report-definitions as p, limit at a time.
func listAll(t *testing.T, s *report.Service, p access.Principal, limit int) (names []string, pages int) {
	t.Helper()
	cursor := ""
	for {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		code, body := call(t, s.ListDefinitions, p, "GET", "/report-definitions?"+q.Encode(), "", "")
		var page report.DefinitionList
		if code != 200 || json.Unmarshal([]byte(body), &page) != nil {
			t.Fatalf("list %s: %d %s", q.Encode(), code, body)
		}
		if len(page.Definitions) > limit {
			t.Fatalf("a page of %d with limit %d", len(page.Definitions), limit)
		}
		pages++
		for _, d := range page.Definitions {
			names = append(names, d.Name)
		}
		if page.NextCursor == "" {
			return names, pages
		}
		if pages > 100 {
			t.Fatal("the pages never end")
		}
		cursor = page.NextCursor
	}
}

// TestDefinitionPages: every definition a caller sees is listed once,
// in order, however small the pages — none is cut off.
func TestDefinitionPages(t *testing.T) {
	s := definitionService(t)
	var acme, all []string
	for i := range 9 {
		// Names repeat, so the order needs the id too.
		name, sel := fmt.Sprintf("weekly %d", i%4), `{"customer":"acme"}`
		if i%3 == 0 {
			sel = `{"customer":"globex"}`
		} else {
			acme = append(acme, name)
		}
		all = append(all, name)
		if code, body := create(t, s, name, sel); code != 201 {
			t.Fatalf("create: %d %s", code, body)
		}
	}
	slices.Sort(acme)
	slices.Sort(all)
	acmePortal := access.Principal{Name: "acme-portal", Role: access.RoleCustomer, Via: access.ViaToken, Selector: access.Selector{"customer": "acme"}}
	for _, tt := range []struct {
		who   access.Principal
		limit int
		want  []string
		pages int
	}{
		{operator, 1, all, 9},
		{operator, 2, all, 5},
		{operator, 4, all, 3},
		{operator, 9, all, 1}, // no empty page after a full last one
		{operator, 8, all, 2},
		{operator, 1000, all, 1},
		{acmePortal, 2, acme, 3},
		{acmePortal, 6, acme, 1},
	} {
		names, pages := listAll(t, s, tt.who, tt.limit)
		if !slices.Equal(names, tt.want) || pages != tt.pages {
			t.Errorf("%s, limit %d: %v in %d pages, want %v in %d", tt.who.Name, tt.limit, names, pages, tt.want, tt.pages)
		}
	}
	// Without limit, a page is report.DefaultPage; bad parameters are 400.
	for _, tt := range []struct {
		query string
		code  int
		want  string
	}{
		{"", 200, `"definitions"`},
		{"?limit=0", 400, "limit"},
		{"?limit=1001", 400, "1 to 1000"},
		{"?limit=ten", 400, "limit"},
		{"?cursor=nonsense", 400, "next_cursor"},
		{"?cursor=" + report.Cursor{Name: "x", ID: 0}.String(), 400, "cursor"},
	} {
		code, body := call(t, s.ListDefinitions, operator, "GET", "/report-definitions"+tt.query, "", "")
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("GET /report-definitions%s: %d %s, want %d with %q", tt.query, code, body, tt.code, tt.want)
		}
	}
}

// TestDefinitionLimits: saving past the limit per tenant, or in all, is
// refused with 409 naming the flag; a second label in the selector does not
// make another tenant; replacing one is not a new one, but moving it to a
// full tenant is.
func TestDefinitionLimits(t *testing.T) {
	s := definitionService(t)
	s.SetLimits(report.Config{MaxDefinitions: 6, MaxDefinitionsPerTenant: 2})
	ids := map[string]string{}
	const perTenant = "is the limit for one tenant, whatever other labels their selectors name (--reports.max-definitions-per-tenant)"
	for _, c := range []struct {
		name, selector string
		code           int
		want           string
	}{
		{"acme 1", `{"customer":"acme"}`, 201, ""},
		{"acme 2", `{"customer":"acme","rack":"r1"}`, 201, ""},
		{"acme 3", `{"customer":"acme"}`, 409, "2 saved report definitions of tenant customer=acme " + perTenant},
		// Varying a second label is the same tenant.
		{"acme eu", `{"customer":"acme","region":"eu"}`, 409, "of tenant customer=acme " + perTenant},
		{"acme rack 2", `{"customer":"acme","rack":"r2"}`, 409, "of tenant customer=acme"},
		{"globex 1", `{"customer":"globex"}`, 201, ""},
		// Definitions naming no tenant are staff's: one more tenant.
		{"fleet", `{}`, 201, ""},
		{"rack r1", `{"rack":"r1"}`, 201, ""},
		{"rack r2", `{"rack":"r2"}`, 409, "naming no tenant (no customer label in their selector) " + perTenant},
		{"globex 2", `{"customer":"globex","rack":"r1"}`, 201, ""},
		{"initech 1", `{"customer":"initech"}`, 409, "--reports.max-definitions)"},
	} {
		code, body := create(t, s, c.name, c.selector)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("create %s: %d %s, want %d with %q", c.name, code, body, c.code, c.want)
		}
		if code == 409 && !strings.Contains(body, `"code": "conflict"`) {
			t.Errorf("create %s: %s, want the code conflict", c.name, body)
		}
		var d report.Definition
		if code == 201 && json.Unmarshal([]byte(body), &d) == nil {
			ids[c.name] = fmt.Sprint(d.ID)
		}
	}
	put := func(name, selector string) (int, string) {
		return call(t, s.PutDefinition, operator, "PUT", "/report-definitions/"+ids[name], ids[name],
			fmt.Sprintf(`{"name":%q,"selector":%s,"period":"1d"}`, name, selector))
	}
	if code, body := put("acme 2", `{"customer":"acme","region":"eu"}`); code != 200 {
		t.Errorf("replacing one within its full tenant: %d %s", code, body)
	}
	if code, body := put("globex 1", `{"customer":"acme","rack":"r9"}`); code != 409 || !strings.Contains(body, "--reports.max-definitions-per-tenant") {
		t.Errorf("moving one to a full tenant: %d %s", code, body)
	}
	// Deleting one makes room again.
	if code, body := call(t, s.DeleteDefinition, operator, "DELETE", "/report-definitions/"+ids["fleet"], ids["fleet"], ""); code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, body := create(t, s, "initech 1", `{"customer":"initech"}`); code != 201 {
		t.Errorf("after a delete: %d %s", code, body)
	}
	// The tenant is --tenant.label's: under another key, customer= is
	// just another label of the definitions naming no tenant.
	s.SetLimits(report.Config{MaxDefinitions: 100, MaxDefinitionsPerTenant: 2, Tenant: "team"})
	if code, body := create(t, s, "no team", `{"customer":"acme"}`); code != 409 || !strings.Contains(body, "naming no tenant (no team label") {
		t.Errorf("under --tenant.label=team: %d %s, want the definitions naming no team full", code, body)
	}
	if code, body := create(t, s, "team a", `{"team":"a","customer":"acme"}`); code != 201 {
		t.Errorf("under --tenant.label=team, team=a: %d %s", code, body)
	}
}

// TestDefinitionLimitsUnderConcurrency: collectors saving at once cannot
// pass the limit between them.
func TestDefinitionLimitsUnderConcurrency(t *testing.T) {
	s := definitionService(t)
	s.SetLimits(report.Config{MaxDefinitions: 100, MaxDefinitionsPerTenant: 3})
	codes := make(chan int, 12)
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			code, _ := create(t, s, fmt.Sprintf("racer %d", i), `{"customer":"acme"}`)
			codes <- code
		})
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[201] != 3 || n[409] != 9 {
		t.Errorf("answers %v, want 3 created and 9 refused", n)
	}
}
