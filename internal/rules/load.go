package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Parse reads one rules file's contents (one or more YAML documents) into a Set.
// name is used in error messages only. It is Load for a single in-memory file.
func Parse(name string, data []byte) (*Set, error) {
	return build([]source{{name: name, data: data}}, Options{})
}

// Options change how rules files are combined. The zero value is the default.
type Options struct {
	// MergeDomains lets several documents (in one file or several) define one domain,
	// as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: their descriptors are merged into
	// one tree, in load order; a descriptor defined twice (same key and value at the
	// same place) is still an error. Default false: a domain defined twice is refused.
	MergeDomains bool
}

// LoadWith is Load with options.
func LoadWith(o Options, paths ...string) (*Set, error) {
	srcs, err := readSources(paths)
	if err != nil {
		return nil, err
	}
	return build(srcs, o)
}

// Load reads rules from files and directories and returns the validated Set.
//
// A directory contributes its *.yaml and *.yml files in name order (not recursively;
// names starting with '.' are skipped, which also skips Kubernetes ConfigMap
// "..data" bookkeeping entries). Every file may hold several YAML documents separated
// by "---", each one `domain:` plus `descriptors:` as in envoyproxy/ratelimit.
//
// Every problem found (up to MaxErrors) is reported at once as ValidationErrors,
// each naming file, line and field.
func Load(paths ...string) (*Set, error) {
	return LoadWith(Options{}, paths...)
}

type source struct {
	name string
	data []byte
}

// resolveFiles expands paths into the ordered list of rules files.
func resolveFiles(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		for _, e := range entries { // ReadDir sorts by name
			n := e.Name()
			if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				continue
			}
			full := filepath.Join(p, n)
			// Follow symlinks (ConfigMap files are symlinks) but skip directories.
			if st, err := os.Stat(full); err != nil || st.IsDir() {
				continue
			}
			files = append(files, full)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoRulesFiles, strings.Join(paths, ", "))
	}
	return files, nil
}

func readSources(paths []string) ([]source, error) {
	files, err := resolveFiles(paths)
	if err != nil {
		return nil, err
	}
	srcs := make([]source, 0, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		srcs = append(srcs, source{name: f, data: data})
	}
	return srcs, nil
}
