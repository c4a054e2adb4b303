package main

import (
	"context"
	"errors"
	"io"
	"testing"
)

// TestClaimStatusWhen: the claim status writer runs with --dra,
// --dra-claim-status (the default), a chained pool and the CNI plugin's
// state directory only; with them and no API server it is an error.
func TestClaimStatusWhen(t *testing.T) {
	noAPI := apiConn{err: errors.New("no API server here")}
	for _, c := range []struct {
		args    []string
		wantErr bool
	}{
		{args: []string{"--cni-mode", "chained", "--cni-chained-pool", "roce"}},
		{args: []string{"--dra"}},
		{args: []string{"--dra", "--cni-mode", "chained", "--cni-chained-pool", "roce", "--dra-claim-status=false"}},
		{args: []string{"--dra", "--cni-mode", "chained", "--cni-chained-pool", "roce", "--cni-state-dir", ""}},
		{args: []string{"--dra", "--cni-mode", "chained", "--cni-chained-pool", "roce"}, wantErr: true},
	} {
		cfg, err := parseRunFlags(c.args, io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		wait, err := startClaimStatus(context.Background(), cfg, noAPI, nil)
		if (err != nil) != c.wantErr {
			t.Errorf("%v: error %v, want error %v", c.args, err, c.wantErr)
		}
		if err == nil {
			wait()
		}
	}
}
