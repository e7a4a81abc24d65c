package workflow

import (
	"fmt"
	"io"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// WriteText writes diagnostics in the text format of 'meshflows validate', one a line:
// FILE:LINE:COLUMN: SEVERITY CODE: MESSAGE.
func WriteText(w io.Writer, file string, ds []apiv1.Diagnostic) error {
	for _, d := range ds {
		if _, err := fmt.Fprintf(w, "%s:%d:%d: %s %s: %s\n", file, d.Line, d.Column, d.Severity, d.Code, d.Message); err != nil {
			return err
		}
	}
	return nil
}

// HasErrors reports whether any diagnostic is an error.
func HasErrors(ds []apiv1.Diagnostic) bool {
	for _, d := range ds {
		if d.Severity == apiv1.SeverityError {
			return true
		}
	}
	return false
}
