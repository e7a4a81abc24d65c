package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestStandsAlone: the repository refers to nothing outside it — no file mentions the
// specification folder a clone does not have.
func TestStandsAlone(t *testing.T) {
	outside := "../" + "shared" // spelled in two parts so that this file does not match itself
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "__pycache__":
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 5<<20 {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), outside) {
			t.Errorf("%s mentions %s, which a clone does not have", path, outside)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLinksResolve: every relative link of every Markdown file leads to a file or folder
// that exists (anchors are not checked).
func TestLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
				t.Errorf("%s links %s, which does not exist", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFrontPagesStayShort: the README is read in one sitting and the performance page is a
// summary; their detail belongs in the pages they point to.
func TestFrontPagesStayShort(t *testing.T) {
	for _, tt := range []struct {
		file string
		max  int
	}{{"../README.md", 250}, {"performance.md", 300}} {
		b, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n >= tt.max {
			t.Errorf("%s has %d lines: keep it under %d (move the detail into docs/)", tt.file, n, tt.max)
		}
	}
}

// TestDocsMapListsEveryPage: docs/README.md, the map of the documentation, links every page.
func TestDocsMapListsEveryPage(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob("*.md")
	more, _ := filepath.Glob("reference/*.md")
	for _, p := range append(pages, more...) {
		if p == "README.md" {
			continue
		}
		if !strings.Contains(string(b), "]("+filepath.ToSlash(p)+")") {
			t.Errorf("docs/README.md does not list %s", p)
		}
	}
}
