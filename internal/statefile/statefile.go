package statefile

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
)

// WriteJSON encodes v as JSON into path atomically (creating the directory if needed): a
// reader sees the old file or the new one, never a part of either.
func WriteJSON(path string, v any) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op after the rename
	w := bufio.NewWriterSize(f, 1<<20)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
