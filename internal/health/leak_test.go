package health

import (
	"fmt"
	"os"
	"reflect"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them, or when any of them
// wrote to what instances and verdicts share (the single reasons, the empty trouble record):
// they read them, never write them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(sharedUntouched{m})
}

type sharedUntouched struct{ m *testing.M }

func (t sharedUntouched) Run() int {
	code := t.m.Run()
	if !reflect.DeepEqual(noTrouble, trouble{}) {
		fmt.Fprintf(os.Stderr, "the shared empty trouble record was written: %+v\n", noTrouble)
		return 1
	}
	for _, r := range []struct {
		shared []string
		want   string
	}{{reasonsDraining, ReasonDraining}, {reasonsFlapping, ReasonFlapping}, {reasonsAdmitting, ReasonAdmitting},
		{reasonsSlowStart, ReasonSlowStart}, {reasonsDegraded, ReasonSelfReportedDegraded}} {
		if len(r.shared) != 1 || cap(r.shared) != 1 || r.shared[0] != r.want {
			fmt.Fprintf(os.Stderr, "the shared reasons %q were written: %q\n", r.want, r.shared)
			return 1
		}
	}
	return code
}
