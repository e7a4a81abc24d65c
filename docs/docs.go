// Package docs carries the operator documentation that the binary serves itself: the
// runbooks (docs/runbooks/*.md), which the console renders on its Runbooks tab and the
// alerts and incidents link to.
package docs

import "embed"

// Runbooks holds runbooks/*.md.
//
//go:embed runbooks/*.md
var Runbooks embed.FS
