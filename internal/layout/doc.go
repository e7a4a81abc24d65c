// Package layout holds no code: its test checks the architecture rules of docs/architecture.md that
// the compiler does not, such as which packages the public SDK packages may depend on.
package layout
