//go:build !race

package nodewatch

const raceEnabled = false
