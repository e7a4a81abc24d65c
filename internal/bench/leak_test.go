package bench_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshflows/meshflows/internal/bench"
)

// floorChild is the environment variable that makes this test binary a floor server, of the
// kind given as its last argument (TestRunRegistryFloor starts it so, as 'meshflows bench
// floor-server' would be). Set to "fail", the server exits with status 3 when it ends.
const floorChild = "MESHFLOWS_BENCH_TEST_FLOOR_SERVER"

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	if os.Getenv(floorChild) != "" {
		os.Exit(serveFloorChild(os.Args[len(os.Args)-1]))
	}
	goleak.VerifyTestMain(m)
}

// serveFloorChild is the floor server process, as 'meshflows bench floor-server' runs it,
// until interrupted.
func serveFloorChild(kind string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := bench.RunFloorServer(ctx, kind, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv(floorChild) == "fail" {
		fmt.Fprintln(os.Stderr, "failing as asked")
		return 3
	}
	return 0
}
