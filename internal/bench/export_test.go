package bench

import (
	"bytes"
	"io"
)

// RespondFloorTo returns what the raw TCP floor server writes to a connection that sends in,
// then ends.
func RespondFloorTo(in []byte, a FloorAnswers) []byte {
	var out bytes.Buffer
	respondFloor(struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(in), &out}, a)
	return out.Bytes()
}
