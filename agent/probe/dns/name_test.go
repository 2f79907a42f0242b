package dns

import "testing"

// DecodeName takes what the kernel copied of a question, which a hostile
// client controls entirely: it must never read past it, and what it
// returns must carry nothing but letters, digits, '-', '_', '.' and \DDD
// escapes.
func TestDecodeName(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want string
		cut  bool
	}{
		{"simple", []byte("\x04cart\x04shop\x03svc\x00\x00\x01"), "cart.shop.svc.", false},
		{"root", []byte{0}, ".", false},
		{"empty", nil, "", true},
		{"cut in a label", []byte("\x04cart\x09sho"), "cart.sho", true},
		{"cut before the end", []byte("\x04cart"), "cart.", true},
		{"compression pointer", []byte("\x04cart\xc0\x0c"), "cart.", true},
		{"escapes", []byte("\x05a.b c\x03x\"\n\x00"), "a\\046b\\032c.x\\034\\010.", false},
		{"upper case kept", []byte("\x03WWW\x00"), "WWW.", false},
		{"zero byte in a label", []byte("\x02a\x00\x00"), "a\\000.", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cut := DecodeName(tc.in)
			if got != tc.want || cut != tc.cut {
				t.Errorf("DecodeName(%q) = %q, %v; want %q, %v", tc.in, got, cut, tc.want, tc.cut)
			}
		})
	}
}

// The longest name the kernel keeps decodes whole, and one byte less is
// cut.
func TestDecodeNameAtTheLimit(t *testing.T) {
	b := make([]byte, 0, NameMax)
	for len(b)+11 <= NameMax-1 {
		b = append(b, 10)
		b = append(b, "abcdefghij"...)
	}
	b = append(b, 0)
	if _, cut := DecodeName(b); cut {
		t.Errorf("a %d-byte name was cut", len(b))
	}
	if _, cut := DecodeName(b[:len(b)-1]); !cut {
		t.Errorf("a name without its end was not reported cut")
	}
}
