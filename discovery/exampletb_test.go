package discovery_test

import "testing"

// exampleT lets an Example use test helpers that want a testing.TB; cleanups are dropped
// because the example closes what it opens itself.
type exampleT struct{ testing.TB }

func (*exampleT) Helper()                   {}
func (*exampleT) Cleanup(func())            {}
func (*exampleT) Fatalf(f string, a ...any) { panic(f) }
