package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// asMeshflows is the environment variable that makes this test binary run as meshflows
// itself, for tests of commands that start the program again (bench registry --floor).
const asMeshflows = "MESHFLOWS_TEST_AS_MESHFLOWS"

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	if os.Getenv(asMeshflows) != "" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
