package access

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSelector(t *testing.T) {
	tests := []struct {
		in      string
		want    Selector
		wantErr string
	}{
		{"", Selector{}, ""},
		{"customer=acme", Selector{"customer": "acme"}, ""},
		{" customer = acme , region=eu ", Selector{"customer": "acme", "region": "eu"}, ""},
		{"customer", nil, "not label=value"},
		{"customer=acme,customer=globex", nil, "appears twice"},
		{"Customer=acme", nil, "not a label key"},
		{"customer=", nil, "value must be 1 to 256 bytes"},
		{"customer=" + strings.Repeat("x", 257), nil, "value must be 1 to 256 bytes"},
		{"customer=ac\x00me", nil, "without NUL"},
		{"customer=\xff", nil, "UTF-8"},
		{"a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9", nil, "at most 8"},
	}
	for _, tt := range tests {
		got, err := ParseSelector(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseSelector(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseSelector(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if s := (Selector{"region": "eu", "customer": "acme"}).String(); s != "customer=acme,region=eu" {
		t.Errorf("String() = %q", s)
	}
	if j := (Selector{"customer": "acme"}).JSON(); j != `{"customer":"acme"}` {
		t.Errorf("JSON() = %s", j)
	}
	if j := Selector(nil).JSON(); j != `{}` {
		t.Errorf("nil JSON() = %s", j)
	}
}

func TestSees(t *testing.T) {
	acmeEU := map[string]string{"customer": "acme", "region": "eu"}
	globex := map[string]string{"customer": "globex"}
	unlabelled := map[string]string(nil)
	tests := []struct {
		name string
		p    Principal
		want [3]bool // acmeEU, globex, unlabelled
	}{
		{"nobody sees nothing", Principal{}, [3]bool{false, false, false}},
		{"viewer sees all", Principal{Role: RoleViewer}, [3]bool{true, true, true}},
		{"admin sees all", Principal{Role: RoleAdmin}, [3]bool{true, true, true}},
		{"acme sees acme", Principal{Role: RoleCustomer, Selector: Selector{"customer": "acme"}}, [3]bool{true, false, false}},
		{"acme in us sees nothing here", Principal{Role: RoleCustomer, Selector: Selector{"customer": "acme", "region": "us"}}, [3]bool{false, false, false}},
		{"a customer without a selector sees nothing", Principal{Role: RoleCustomer}, [3]bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := [3]bool{tt.p.Sees(acmeEU), tt.p.Sees(globex), tt.p.Sees(unlabelled)}
			if got != tt.want {
				t.Errorf("Sees = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLabelClause(t *testing.T) {
	tests := []struct {
		name     string
		p        Principal
		clause   string
		wantArgs []any
	}{
		{"nobody", Principal{}, "FALSE", nil},
		{"viewer", Principal{Role: RoleViewer}, "TRUE", nil},
		{"customer", Principal{Role: RoleCustomer, Selector: Selector{"customer": "acme"}}, "n.labels @> $3::jsonb", []any{`{"customer":"acme"}`}},
		{"customer without selector", Principal{Role: RoleCustomer}, "FALSE", nil},
	}
	for _, tt := range tests {
		clause, args := tt.p.LabelClause("n.labels", 3)
		if clause != tt.clause || !reflect.DeepEqual(args, tt.wantArgs) {
			t.Errorf("%s: LabelClause = %q %v, want %q %v", tt.name, clause, args, tt.clause, tt.wantArgs)
		}
	}
}
