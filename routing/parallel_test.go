package routing_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshflows/meshflows/routing"
)

// TestDeriveSameOnOneCoreAndMany: sharing manifest analysis between cores changes
// nothing in the table, including which manifests are rejected and in what order.
func TestDeriveSameOnOneCoreAndMany(t *testing.T) {
	in := fleet(1500) // 3,000 manifests: several workers
	// a few rejections spread over the chunks
	for i := 7; i < len(in.Manifests); i += 701 {
		in.Manifests[i].Manifest = []byte(fmt.Sprintf(`{"farp":"1.0","service":{"name":"svc-x%d","instance":"x%d","version":"1.0.0"},"routes":[{"path":"/admin","methods":["GET"]}]}`, i, i))
	}
	prev := runtime.GOMAXPROCS(1)
	one := routing.Derive(in).Canonical()
	runtime.GOMAXPROCS(max(prev, 4))
	many := routing.Derive(in).Canonical()
	runtime.GOMAXPROCS(prev)
	if diff := cmp.Diff(one, many); diff != "" {
		t.Fatalf("derivation on several cores differs (-one +many):\n%s", diff)
	}
	if len(one.Rejected) == 0 {
		t.Fatal("the test's bad manifests were not rejected")
	}
}
