package testtool

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/goccy/go-yaml"
)

// YAMLDocs decodes every document of the YAML file at path (a Kubernetes manifest of several
// objects) into a T each, failing the test when the file is missing or is not YAML.
func YAMLDocs[T any](t testing.TB, path string) []T {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var docs []T
	for {
		var doc T
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s is not YAML: %v", path, err)
		}
		docs = append(docs, doc)
	}
}
