package ingress

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Every problem the ingress answers comes from a constructor in internal/httpx/errors.go,
// the one place that pairs a problem type with its status and title (issue #19). Read from
// the source, so a handler that builds an httpx.Problem literal again, or names a problem
// type URI itself, fails here. Tests may build literals to state what they expect.
func TestProblemsComeFromTheOneMapping(t *testing.T) {
	t.Parallel()
	// The services the server mounts whose problems it answers: submission (internal/submit)
	// and its decoding (internal/request), which left this package (issue #34).
	var files []string
	for _, dir := range []string{".", "../submit", "../request"} {
		fs, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	fset := token.NewFileSet()
	scanned := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		scanned++
		httpx := importName(f, "github.com/sluice-io/sluice/internal/httpx")
		if httpx == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if isSelector(n.Type, httpx, "Problem") {
					t.Errorf("%s: an httpx.Problem literal; use a constructor of internal/httpx/errors.go (add one if none fits)", fset.Position(n.Pos()))
				}
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == httpx && strings.HasPrefix(n.Sel.Name, "Type") {
					t.Errorf("%s: httpx.%s named in a handler; the constructors of internal/httpx/errors.go pair types with statuses", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
			return true
		})
	}
	if scanned < 10 {
		t.Fatalf("scanned %d files of the ingress: not the package's source", scanned)
	}
}

// importName is the name a file uses for the package at path, or "" if it does not import it.
func importName(f *ast.File, path string) string {
	for _, im := range f.Imports {
		if strings.Trim(im.Path.Value, `"`) != path {
			continue
		}
		if im.Name != nil {
			return im.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}
