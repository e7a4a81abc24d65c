package statefile

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
)

// WriteJSON encodes v as JSON into path atomically (creating the directory if needed): a
// reader sees the old file or the new one, never a part of either.
func WriteJSON(path string, v any) error {
	return Write(path, func(w io.Writer) error { return json.NewEncoder(w).Encode(v) })
}

// Write writes into path atomically what write writes (creating the directory if needed),
// through a buffer of its own: a reader sees the old file or the new one, never a part of
// either. A file too large to hold in memory at once is written as it is made.
func Write(path string, write func(io.Writer) error) error {
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
	if err := write(w); err != nil {
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
