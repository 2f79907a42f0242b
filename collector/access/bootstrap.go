package access

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// BootstrapTokenName names the admin token EnsureBootstrapAdmin keeps.
const BootstrapTokenName = "bootstrap-admin"

// EnsureBootstrapAdmin makes a fresh admin token named BootstrapTokenName,
// revoking the one a previous start made (its secret was shown then and is
// not stored), and returns the new secret. It is how `make run` works
// without configuration; the app calls it when --auth.bootstrap-admin is
// set and prints LoginURL(externalURL, secret).
func (a *Access) EnsureBootstrapAdmin(ctx context.Context) (string, Token, error) {
	ctx = WithPrincipal(ctx, Principal{Name: "bootstrap", Role: RoleAdmin, Via: ViaSystem})
	var secret string
	var t Token
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		// Lock before looking, so two collectors starting at once leave
		// one live bootstrap token, not two or a conflict.
		if err := lockTokens(ctx, tx); err != nil {
			return err
		}
		if _, err := a.revokeNamed(ctx, tx, BootstrapTokenName); err != nil {
			return err
		}
		var err error
		secret, t, err = a.createToken(ctx, tx, NewToken{Name: BootstrapTokenName, Role: RoleAdmin})
		return err
	})
	return secret, t, err
}

// LoginURL is the UI's login page carrying a token in the fragment, which
// browsers never send to the server: it stays out of access logs and proxy
// logs. The page posts it to /api/v1/login and drops it from the address.
func LoginURL(base, secret string) string {
	return strings.TrimRight(base, "/") + "/login#token=" + secret
}
