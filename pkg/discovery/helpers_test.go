package discovery_test

import (
	"errors"
	"os"
	"slices"
	"strconv"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }
func tempDir() (string, error)        { return os.MkdirTemp("", "discovery-example-") }
func cleanup(dir string)              { _ = os.RemoveAll(dir) }

func itoa(i int) string { return strconv.Itoa(i) }

func equalInts(a, b []int) bool { return slices.Equal(a, b) }
