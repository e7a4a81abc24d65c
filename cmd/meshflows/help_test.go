package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// stalePhrases are help texts that once said something no longer true.
var stalePhrases = []string{"not built yet", "listed as such", "this provider's identity", "--format json", "--json"}

// TestHelpTree walks every command: each has a one-line summary, a longer description and
// at least one example; every example line that runs meshflows parses (its command exists,
// its flags are known); no help says a stale phrase, and every flag explains itself.
func TestHelpTree(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		t.Run(c.CommandPath(), func(t *testing.T) {
			if strings.TrimSpace(c.Short) == "" || strings.Contains(c.Short, "\n") {
				t.Error("no one-line summary (Short)")
			}
			if len(strings.TrimSpace(c.Long)) < len(c.Short)+20 {
				t.Error("no longer description (Long)")
			}
			if strings.TrimSpace(c.Example) == "" {
				t.Error("no example")
			}
			for _, text := range []string{c.Short, c.Long, c.Example, c.Flags().FlagUsages()} {
				for _, p := range stalePhrases {
					if strings.Contains(text, p) {
						t.Errorf("says the stale %q", p)
					}
				}
			}
			c.Flags().VisitAll(func(f *pflag.Flag) {
				if strings.TrimSpace(f.Usage) == "" && !f.Hidden {
					t.Errorf("flag --%s has no help", f.Name)
				}
			})
			for _, line := range strings.Split(c.Example, "\n") {
				args := exampleArgs(line)
				if args == nil {
					continue
				}
				root := newRootCmd()
				cmd, rest, err := root.Find(args)
				if err != nil || cmd == root {
					t.Errorf("example %q names no command: %v", strings.TrimSpace(line), err)
					continue
				}
				if err := cmd.ParseFlags(rest); err != nil {
					t.Errorf("example %q does not parse: %v", strings.TrimSpace(line), err)
				}
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRootCmd()
	for _, c := range root.Commands() {
		walk(c)
	}
}

// exampleArgs splits an example line into the arguments after "meshflows" (single and double
// quotes group; environment assignments before it are skipped), or nil when the line does not
// run meshflows. What follows a pipe or a redirection is not meshflows'.
func exampleArgs(line string) []string {
	type word struct {
		s      string
		quoted bool
	}
	var words []word
	var cur strings.Builder
	quote, in, quoted := rune(0), false, false
	flush := func() {
		if in || cur.Len() > 0 {
			words = append(words, word{cur.String(), quoted})
			cur.Reset()
			in, quoted = false, false
		}
	}
	for _, r := range strings.TrimSpace(line) {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in, quoted = r, true, true
		case r == ' ' || r == '\t':
			flush()
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	flush()
	for i, w := range words {
		if strings.Contains(w.s, "=") && !strings.HasPrefix(w.s, "-") {
			continue // VAR=value
		}
		if w.s != "meshflows" {
			return nil
		}
		var args []string
		for _, a := range words[i+1:] {
			if !a.quoted && (a.s == "|" || a.s == "&&" || a.s == "&" || strings.HasPrefix(a.s, ">") || strings.HasPrefix(a.s, "<")) {
				break
			}
			args = append(args, a.s)
		}
		return args
	}
	return nil
}
