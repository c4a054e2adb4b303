package netnstest

import (
	"regexp"
	"strings"
	"testing"
)

func TestRunPattern(t *testing.T) {
	names := []string{"TestAdd", "TestAddCheckDel", "TestAdd/spec_1.0.0", "TestAdd/spec_1.0.0#01", "TestDel/rxe0/DEL_(again)", "TestX/a+b"}
	for _, name := range names {
		pat := strings.Split(runPattern(name), "/")
		for _, other := range names {
			parts := strings.Split(other, "/")
			// go test runs other if each level of it that the pattern has
			// matches, and it has at least as many levels.
			match := len(parts) >= len(pat)
			for i := 0; match && i < len(pat); i++ {
				match = regexp.MustCompile(pat[i]).MatchString(parts[i])
			}
			if want := other == name || strings.HasPrefix(other, name+"/"); match != want {
				t.Errorf("runPattern(%q) = %q matches %q: %v, want %v", name, runPattern(name), other, match, want)
			}
		}
	}
}
