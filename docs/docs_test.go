// Package docs_test holds the reference in docs/ to the code and to api/openapi.yaml: the
// routes, problem types, headers and request fields the pages describe are the ones the
// server has, no more and no fewer, and every link stays inside the repository. The rules
// file's fields are checked where the parser keeps them (internal/rules, docs_test.go).
package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/sink"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of md from the heading line `heading` to the next heading of
// the same or a higher level.
func section(t *testing.T, md, heading string) string {
	t.Helper()
	level := strings.IndexByte(heading, ' ')
	lines := strings.Split(md, "\n")
	for i, l := range lines {
		if l != heading {
			continue
		}
		var out []string
		for _, m := range lines[i+1:] {
			if n := strings.IndexByte(m, ' '); strings.HasPrefix(m, "#") && n > 0 && n <= level && strings.Trim(m[:n], "#") == "" {
				break
			}
			out = append(out, m)
		}
		return strings.Join(out, "\n")
	}
	t.Fatalf("no heading %q", heading)
	return ""
}

// firstCells lists the first cell of every table row of md whose first cell is `code`.
func firstCells(md string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

func openapi(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func sorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// diff reports what is in want and not in got, and the reverse.
func diff(t *testing.T, what string, want, got map[string]bool, wantName, gotName string) {
	t.Helper()
	for _, k := range sorted(want) {
		if !got[k] {
			t.Errorf("%s %s is in %s but not in %s", what, k, wantName, gotName)
		}
	}
	for _, k := range sorted(got) {
		if !want[k] {
			t.Errorf("%s %s is in %s but not in %s", what, k, gotName, wantName)
		}
	}
}

// Every operation of openapi.yaml has its own heading in http-api.md, and every route
// heading there is an operation (internal/ingress's route tests hold openapi.yaml to the
// routes the server registers, so this page is held to them too).
func TestHTTPAPIRoutes(t *testing.T) {
	t.Parallel()
	md := read(t, "http-api.md")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^### `([A-Z]+ /[^`]*)`$").FindAllStringSubmatch(md, -1) {
		if documented[m[1]] {
			t.Errorf("http-api.md: %s has two headings", m[1])
		}
		documented[m[1]] = true
	}
	inAPI := map[string]bool{}
	for _, r := range api.Routes() {
		inAPI[r.Pattern()] = true
	}
	if len(inAPI) < 20 {
		t.Fatalf("api.Routes() has only %d routes", len(inAPI))
	}
	diff(t, "route", inAPI, documented, "api/openapi.yaml", "docs/http-api.md")
}

// problemTypeRE finds a problem type where the code defines or sends one: the full URI,
// or httpx's ProblemBase + "#name".
var problemTypeRE = regexp.MustCompile(`(?:sluice\.dev/problems|ProblemBase \+ ")#([a-z][a-z-]*)`)

// Every problem type the code names (any non-test Go file of the repository) is in the
// problem-type table of http-api.md, and the table is openapi.yaml's ProblemType enum.
func TestProblemTypes(t *testing.T) {
	t.Parallel()
	inCode := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range problemTypeRE.FindAllStringSubmatch(string(b), -1) {
			inCode["https://sluice.dev/problems#"+m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(inCode) < 10 {
		t.Fatalf("found only %d problem types in the code: %v", len(inCode), sorted(inCode))
	}
	table := map[string]bool{}
	for _, c := range firstCells(section(t, read(t, "http-api.md"), "## Problem types")) {
		table[c] = true
	}
	diff(t, "problem type", inCode, table, "the code", "docs/http-api.md's table")
	enum := map[string]bool{}
	for _, v := range get(openapi(t), "components", "schemas", "ProblemType", "enum").([]any) {
		enum[v.(string)] = true
	}
	diff(t, "problem type", enum, table, "api/openapi.yaml's ProblemType", "docs/http-api.md's table")
}

// The response headers of openapi.yaml are in http-api.md's rate-limit table (or named on
// the page); the sink's headers, as the code sends them, are delivery.md's table and the
// webhook's parameters.
func TestHeaders(t *testing.T) {
	t.Parallel()
	doc := openapi(t)
	md := read(t, "http-api.md")
	for name := range get(doc, "components", "headers").(map[string]any) {
		if !strings.Contains(md, "`"+name+"`") && !strings.Contains(md, "`"+name+":") {
			t.Errorf("response header %s (api/openapi.yaml) is not in docs/http-api.md", name)
		}
	}
	rl := map[string]bool{}
	for _, c := range firstCells(section(t, md, "## Rate-limit headers")) {
		rl[c] = true
	}
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Retry-After", "RateLimit-Policy", "RateLimit", "Retry-After"} {
		if !rl[h] {
			t.Errorf("docs/http-api.md's rate-limit table has no %s", h)
		}
	}

	sent := map[string]bool{}
	for _, h := range []string{sink.HeaderContentType, sink.HeaderIdempotencyKey, sink.HeaderMessageID, sink.HeaderAttempt,
		sink.HeaderRule, sink.HeaderKey, sink.HeaderEnqueuedAt, sink.HeaderFence, sign.Header,
		sign.HeaderWebhookID, sign.HeaderWebhookTimestamp, sign.HeaderWebhookSignature} {
		sent[h] = true
	}
	table := map[string]bool{}
	for _, c := range firstCells(section(t, read(t, "delivery.md"), "## The request")) {
		table[c] = true
	}
	diff(t, "sink header", sent, table, "internal/sink and internal/sign", "docs/delivery.md's table")
	webhook := map[string]bool{sink.HeaderContentType: true} // the webhook states it as its body's media type
	for _, p := range get(doc, "webhooks", "sinkDelivery", "post", "parameters").([]any) {
		if get(p, "in") == "header" {
			webhook[get(p, "name").(string)] = true
		}
	}
	diff(t, "sink header", sent, webhook, "internal/sink and internal/sign", "api/openapi.yaml's sinkDelivery webhook")
}

// The fields of a submission in http-api.md's table are openapi.yaml's SubmitRequest.
func TestSubmitFields(t *testing.T) {
	t.Parallel()
	want := map[string]bool{}
	for name := range get(openapi(t), "components", "schemas", "SubmitRequest", "properties").(map[string]any) {
		want[name] = true
	}
	got := map[string]bool{}
	for _, c := range firstCells(section(t, read(t, "http-api.md"), "### `POST /v1/messages`")) {
		got[c] = true
	}
	diff(t, "submit field", want, got, "api/openapi.yaml's SubmitRequest", "docs/http-api.md")
}

// anchorRE is an explicit anchor, for a paragraph that is not a heading.
var anchorRE = regexp.MustCompile(`<a id="([^"]+)"></a>`)

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is the anchor GitHub gives a heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(md string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(l, "#") {
			out[slug(strings.TrimLeft(l, "#"))] = true
		}
		for _, m := range anchorRE.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// Every relative link of docs/, the README and the READMEs of deploy/ and examples/ leads to
// a file of the repository (and, with a #fragment into a Markdown file, to one of its
// headings): a clone has no dead links.
func TestLinksStayInTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob("*.md")
	if len(pages) < 10 {
		t.Fatalf("docs/ has only %d pages: %v", len(pages), pages)
	}
	pages = append(pages, "../README.md", "../deploy/README.md", "../examples/README.md")
	for _, page := range pages {
		name := filepath.ToSlash(filepath.Join("docs", page)) // as the repository names it: docs/README.md, README.md
		for _, m := range linkRE.FindAllStringSubmatch(read(t, page), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(link, "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), file)
			}
			abs, err := filepath.Abs(target)
			if err != nil || !strings.HasPrefix(abs, root+string(filepath.Separator)) {
				t.Errorf("%s: link %s leaves the repository", name, link)
				continue
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %s: %v", name, link, err)
				continue
			}
			if frag != "" && strings.HasSuffix(target, ".md") && !anchors(read(t, target))[frag] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", name, link, file, frag)
			}
		}
	}
}

// outsideRE is how a file would point at the design documents that lived outside the
// repository.
var outsideRE = regexp.MustCompile(`\.\./shared|\bAPI\.md\b|\bDESIGN\.md\b`)

// Nothing in the repository points at design documents outside it: a clone from GitHub has
// its whole reference.
func TestStandsAlone(t *testing.T) {
	t.Parallel()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "docs/docs_test.go" || rel == "CHANGELOG.md" { // the pattern itself; history
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".json", ".lua", ".sh", ".conf", ".txt", ".js", ".html", ".css":
		default:
			if d.Name() != "Makefile" && d.Name() != "Dockerfile" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if loc := outsideRE.FindIndex(b); loc != nil {
			line := strings.Count(string(b[:loc[0]]), "\n") + 1
			t.Errorf("%s:%d cites %q, which is not in the repository; point at docs/ instead", rel, line, b[loc[0]:loc[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// codeWords are the words inside the page's code spans (`…`): field names as the page
// shows them, in a table cell or a JSON sketch such as `{"id","state"}`.
func codeWords(md string) map[string]bool {
	out := map[string]bool{}
	md = regexp.MustCompile("(?ms)^```.*?^```").ReplaceAllString(md, "") // fenced blocks are not spans
	for _, span := range regexp.MustCompile("`[^`]+`").FindAllString(md, -1) {
		for _, w := range regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_-]*`).FindAllString(span, -1) {
			out[w] = true
		}
	}
	return out
}

// Every field of the answers openapi.yaml describes is named on http-api.md.
func TestResponseFields(t *testing.T) {
	t.Parallel()
	doc := openapi(t)
	words := codeWords(read(t, "http-api.md"))
	for _, schema := range []string{"Submission", "MessageStatus", "Queue", "QueueKey", "QueuePatch", "DeadMessage",
		"DeadList", "AuditRecord", "AuditList", "CheckResponse", "DescriptorStatus", "CurrentLimit", "BatchAnswer", "Problem"} {
		props, ok := get(doc, "components", "schemas", schema, "properties").(map[string]any)
		if !ok {
			t.Errorf("api/openapi.yaml has no schema %s with properties", schema)
			continue
		}
		for name := range props {
			if !words[name] {
				t.Errorf("field %s of %s (api/openapi.yaml) is not named in docs/http-api.md", name, schema)
			}
		}
	}
}

// The README is a tour a newcomer reads first (issue #34): at most 300 lines, opening with
// the two commands. The reference belongs in docs/.
func TestREADMEIsATour(t *testing.T) {
	t.Parallel()
	readme := read(t, "../README.md")
	if n := strings.Count(readme, "\n"); n > 300 {
		t.Errorf("README.md has %d lines; a tour has at most 300: move reference text into docs/", n)
	}
	head, _, _ := strings.Cut(readme, "\n```\n")
	for _, cmd := range []string{"make run", "make test"} {
		if !strings.Contains(head, "\n"+cmd+" ") {
			t.Errorf("README.md does not open with %q in its first code block", cmd)
		}
	}
}

// docs/README.md is the table of contents: every page of docs/ is linked from it.
func TestIndexListsEveryPage(t *testing.T) {
	t.Parallel()
	linked := map[string]bool{}
	for _, m := range linkRE.FindAllStringSubmatch(read(t, "README.md"), -1) {
		file, _, _ := strings.Cut(m[1], "#")
		linked[file] = true
	}
	pages, _ := filepath.Glob("*.md")
	for _, page := range pages {
		if page != "README.md" && !linked[page] {
			t.Errorf("docs/README.md does not link to %s", page)
		}
	}
}

// fileEntryRE is one entry of a doc.go file map: "//   - name.go: what it holds".
var fileEntryRE = regexp.MustCompile(`^//   - ([A-Za-z0-9_.]+\.go): `)

// A package's doc.go may map its files under "# Files" (issue #34: a newcomer finds where
// each part lives); a map lists every non-test .go file of the package, and only those.
func TestFileMaps(t *testing.T) {
	t.Parallel()
	maps := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "doc.go" {
			return nil
		}
		dir := filepath.Dir(path)
		lines := strings.Split(read(t, path), "\n")
		listed := map[string]bool{}
		inMap := false
		for _, l := range lines {
			switch {
			case l == "// # Files":
				inMap = true
			case inMap && strings.HasPrefix(l, "// # "), inMap && !strings.HasPrefix(l, "//"):
				inMap = false
			case inMap:
				if m := fileEntryRE.FindStringSubmatch(l); m != nil {
					if listed[m[1]] {
						t.Errorf("%s: %s is listed twice", filepath.ToSlash(path), m[1])
					}
					listed[m[1]] = true
				}
			}
		}
		if len(listed) == 0 {
			return nil
		}
		maps++
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		present := map[string]bool{}
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				present[filepath.Base(f)] = true
			}
		}
		rel, _ := filepath.Rel("..", dir)
		rel = filepath.ToSlash(rel)
		diff(t, "file", present, listed, rel, rel+"/doc.go's # Files")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if maps < 10 {
		t.Errorf("only %d packages map their files in doc.go", maps)
	}
}

// pathRE is a repository path in a code span: `queue/claim.lua`, `internal/admit`,
// `deploy/examples/`.
var pathRE = regexp.MustCompile("`((?:api|bucket|client|cmd|deploy|docs|examples|integration|internal|queue|retry)/[A-Za-z0-9_./-]*)`")

// The files and directories the README's tour names (how one message travels, the use
// cases) are there: when code moves, the tour follows it.
func TestREADMEPathsExist(t *testing.T) {
	t.Parallel()
	n := 0
	for _, m := range pathRE.FindAllStringSubmatch(read(t, "../README.md"), -1) {
		n++
		if _, err := os.Stat(filepath.Join("..", m[1])); err != nil {
			t.Errorf("README.md names %s, which is not in the repository", m[1])
		}
	}
	if n < 10 {
		t.Errorf("found only %d paths in README.md", n)
	}
}
