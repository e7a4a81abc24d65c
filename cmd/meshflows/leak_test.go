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
	drillChildEnv = []string{asMeshflows + "=1"} // the drill's processes are this binary, run as meshflows
	// gRPC builds the TLS channel credentials of an xDS bootstrap (TestXDSBehindAnIdentity's)
	// when it parses the bootstrap, with a file watcher that a bootstrap given for testing
	// never stops.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("google.golang.org/grpc/credentials/tls/certprovider/pemfile.(*watcher).run"))
}
