package process_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/devstack"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/process/ingress"
)

// TestREADMEFlagTables holds the flag tables of docs/configuration.md ("## ingress",
// "## drainer", "## sluice dev"; they were the README's until it became a tour) to the real
// flag sets: every flag has its row, every row is a real
// flag (or one of the actions -check-config and -version), and each row's variable and
// default are the flag's. The tables cannot drift from the code.
func TestREADMEFlagTables(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, tc := range []struct {
		heading string
		flags   []process.Flag
		actions []string
	}{
		{"## ingress", ingress.Flags(), []string{"check-config", "version"}},
		{"## drainer", process.DrainerFlags(), []string{"version"}},
		{"## sluice dev", devstack.Flags(), nil},
	} {
		rows := flagTable(t, readme, tc.heading)
		seen := map[string]bool{}
		for _, f := range tc.flags {
			seen[f.Name] = true
			r, ok := rows[f.Name]
			if !ok {
				t.Errorf("%s: no row for -%s (%s, default %q)", tc.heading, f.Name, f.Env, f.Default)
				continue
			}
			if r.env != "`"+f.Env+"`" {
				t.Errorf("%s -%s: env %s, want `%s`", tc.heading, f.Name, r.env, f.Env)
			}
			switch {
			case f.Default == "":
				if !strings.HasPrefix(r.def, "empty") && r.def != "(required)" {
					t.Errorf("%s -%s: default %q, want it to say empty (or (required))", tc.heading, f.Name, r.def)
				}
			case !strings.HasPrefix(r.def, "`"+f.Default+"`"):
				t.Errorf("%s -%s: default %q, want `%s`", tc.heading, f.Name, r.def, f.Default)
			}
		}
		for _, a := range tc.actions {
			seen[a] = true
			if r, ok := rows[a]; !ok || r.env != "—" {
				t.Errorf("%s: the action -%s wants a row without a variable (—), got %+v", tc.heading, a, r)
			}
		}
		for name := range rows {
			if !seen[name] {
				t.Errorf("%s: the row -%s is not a flag of the binary", tc.heading, name)
			}
		}
	}
}

type flagRow struct{ env, def string }

var flagRowRE = regexp.MustCompile("^\\| `-([a-z0-9-]+)` \\| ([^|]*) \\| ([^|]*) \\|")

// flagTable reads the table under heading: rows "| `-name` | env | default | meaning |".
func flagTable(t *testing.T, readme, heading string) map[string]flagRow {
	t.Helper()
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("docs/configuration.md has no %q section", heading)
	}
	rows := map[string]flagRow{}
	inTable := false
	for _, line := range strings.Split(readme[i+len(heading)+2:], "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		if strings.HasPrefix(line, "| flag |") || strings.HasPrefix(line, "|---") {
			continue
		}
		m := flagRowRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s: a row that is not one flag: %s", heading, line)
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("%s: -%s has two rows", heading, m[1])
		}
		rows[m[1]] = flagRow{env: strings.TrimSpace(m[2]), def: strings.TrimSpace(m[3])}
	}
	if len(rows) == 0 {
		t.Fatalf("docs/configuration.md %q has no flag table", heading)
	}
	return rows
}
