package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/spf13/cobra"
)

// outputFlag is -o/--output, the one output flag of every command that prints data.
type outputFlag struct {
	value string
}

// bind adds -o/--output with its default.
func (o *outputFlag) bind(cmd *cobra.Command, def string) {
	cmd.Flags().StringVarP(&o.value, "output", "o", def, "output format")
}

// check refuses a value outside valid with exit 2, naming the valid ones.
func (o *outputFlag) check(valid ...string) error {
	if o.value == "" || slices.Contains(valid, o.value) {
		return nil
	}
	return &exitError{code: 2, err: fmt.Errorf("-o %q: want one of %s", o.value, strings.Join(valid, ", "))}
}

// write prints v as JSON (indented) or YAML (the JSON field names).
func (o *outputFlag) write(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if o.value == "yaml" {
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
