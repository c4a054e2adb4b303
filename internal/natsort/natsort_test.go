package natsort

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSort(t *testing.T) {
	got := []string{"mlx5_10", "mlx5_2", "mlx5_1", "ib0", "mlx5_02", "rxe0", "mlx5_", "mlx5_99999999999999999999", "mlx5_100"}
	Sort(got)
	want := []string{"ib0", "mlx5_", "mlx5_1", "mlx5_2", "mlx5_02", "mlx5_10", "mlx5_100", "mlx5_99999999999999999999", "rxe0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Sort (-want +got):\n%s", diff)
	}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"a", "a", 0},
		{"a2", "a10", -1},
		{"a10", "a2", 1},
		{"a", "ab", -1},
		{"0001:00", "0000:ff", 1},
		{"x9y", "x9z", -1},
	} {
		if got := Compare(tc.a, tc.b); got != tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
