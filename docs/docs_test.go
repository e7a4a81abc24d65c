package docs

import (
	"io/fs"
	"os"
	"path/filepath"
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
