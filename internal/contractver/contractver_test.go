package contractver

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheck(t *testing.T) {
	second := Format{Kind: "claim record", Key: "version", First: 1, Current: 2, Unversioned: 1}
	first := Format{Kind: "attachment record", Key: "schema", First: 1, Current: 1}
	tests := []struct {
		name    string
		f       Format
		data    string
		want    int
		wantErr error  // nil, ErrNewer, ErrOlder, or errDecode
		msg     string // the error's text, when it is a *VersionError
	}{
		{"current", second, `{"version":2,"uid":"a"}`, 2, nil, ""},
		{"previous", second, `{"version":1}`, 1, nil, ""},
		{"no key is Unversioned", second, `{"uid":"a"}`, 1, nil, ""},
		{"newer", second, `{"version":3}`, 3, ErrNewer,
			"claim record /x: version 3 is newer than this kube-rdma reads (2 and 1): " + Remedy},
		{"older than previous", Format{Kind: "k", Key: "v", First: 1, Current: 3}, `{"v":1}`, 1, ErrOlder,
			"k /x: version 1 is older than this kube-rdma reads (3 and 2): " + Remedy},
		{"first version only", first, `{"schema":1}`, 1, nil, ""},
		{"first version, newer", first, `{"schema":2}`, 2, ErrNewer,
			"attachment record /x: version 2 is newer than this kube-rdma reads (1): " + Remedy},
		{"no key, none allowed", first, `{}`, 0, ErrOlder,
			"attachment record /x: version 0 is older than this kube-rdma reads (1): " + Remedy},
		{"not JSON", second, `{"version":`, 0, errDecode, ""},
		{"version not a number", second, `{"version":"2"}`, 0, errDecode, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.f.Check("/x", []byte(tt.data))
			var verr *VersionError
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Check = %v", err)
			case tt.wantErr == errDecode:
				if err == nil || errors.As(err, &verr) {
					t.Fatalf("Check = %v, want a decode error", err)
				}
				return
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) || !errors.As(err, &verr) {
					t.Fatalf("Check = %v, want a *VersionError wrapping %v", err, tt.wantErr)
				}
				if diff := cmp.Diff(tt.msg, err.Error()); diff != "" {
					t.Errorf("message (-want +got)\n%s", diff)
				}
				if other := map[error]error{ErrNewer: ErrOlder, ErrOlder: ErrNewer}[tt.wantErr]; errors.Is(err, other) {
					t.Errorf("Check = %v also wraps %v", err, other)
				}
			}
			if got != tt.want {
				t.Errorf("version %d, want %d", got, tt.want)
			}
		})
	}
}

var errDecode = errors.New("decode error")

func TestReads(t *testing.T) {
	for _, tt := range []struct {
		f    Format
		want []int
	}{
		{Format{First: 1, Current: 1}, []int{1}},
		{Format{First: 1, Current: 2}, []int{2, 1}},
		{Format{First: 1, Current: 5}, []int{5, 4}},
	} {
		if diff := cmp.Diff(tt.want, tt.f.Reads()); diff != "" {
			t.Errorf("%+v: Reads (-want +got)\n%s", tt.f, diff)
		}
	}
}
