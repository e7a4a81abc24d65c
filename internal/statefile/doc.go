// Package statefile writes the files a component keeps its state in (the registry's
// snapshots, the gateway's last routes view) so that a crash never leaves a torn one: a
// temporary file in the same directory, synced, then renamed over the old.
package statefile
