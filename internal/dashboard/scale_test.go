package dashboard

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/testtool"
)

// TestScaleCommandExampleAddsOne runs the --scale-command the help and the console guide
// show, through the hook the Scale provider button calls, against a fake kubectl that says
// the Deployment has 3 replicas and records what it is asked: the example must ask for 4
// (an absolute --replicas=+1 would have set 1).
func TestScaleCommandExampleAddsOne(t *testing.T) {
	testtool.Need(t, "the example is a POSIX shell script", "sh")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(filepath.Join(root, "docs", "console.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), "--scale-command '"+ScaleCommandExample+"'") {
		t.Errorf("docs/console.md does not show the example --scale-command '%s'", ScaleCommandExample)
	}
	bin, calls := t.TempDir(), filepath.Join(t.TempDir(), "calls")
	fake := `#!/bin/sh
echo "$*" >> "` + calls + `"
case $1 in
get) printf 3 ;;
scale) echo "deployment.apps/$2 scaled" ;;
*) exit 2 ;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Chdir(root) // the example names the script by its path in the repository
	hook := ScaleHook{Command: strings.Fields(ScaleCommandExample)}
	out, err := hook.call(context.Background(), "egress-jms", "a", "inc-1", "ops")
	if err != nil {
		t.Fatalf("the example failed: %v\n%s", err, out)
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	want := "get deployment/egress-jms -o jsonpath={.spec.replicas}\n" +
		"scale deployment/egress-jms --current-replicas=3 --replicas=4\n"
	if string(got) != want {
		t.Errorf("kubectl was called with\n%s\nwant\n%s", got, want)
	}
}
