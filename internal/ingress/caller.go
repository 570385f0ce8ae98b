package ingress

import "context"

// Caller names the token that authenticated a request and its scope, for the admin API
// (admin.Admin.Caller): its audit records and whoami. "", "" when none did.
func Caller(ctx context.Context) (name, scope string) {
	t, _ := TokenOf(ctx)
	return t.Name, t.Scope
}
