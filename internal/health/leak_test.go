package health

import (
	"fmt"
	"os"
	"reflect"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them, or when any of them
// wrote to the shared zero trouble record (instances read it, never write it).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(troubleUntouched{m})
}

type troubleUntouched struct{ m *testing.M }

func (t troubleUntouched) Run() int {
	code := t.m.Run()
	if !reflect.DeepEqual(noTrouble, trouble{}) {
		fmt.Fprintf(os.Stderr, "the shared zero trouble record was written: %+v\n", noTrouble)
		return 1
	}
	return code
}
