//go:build race

package nodewatch

// The race detector allocates on its own; allocation counts are checked without it.
const raceEnabled = true
