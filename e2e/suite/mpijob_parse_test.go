package suite

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

// UCX 1.13's lines as the rxe cluster's job printed them, around mpi-check's.
const mpiOut = `[1796136378.925308] [mpi-1:30   :0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(self/memory0 rc_verbs/rxe0:1)
rank 1 of 2 on mpi-1
[1796136380.205609] [mpi-1:30   :0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: tag(rc_verbs/rxe0:1)
rank 0 of 2 on mpi-0
allreduce ok rank=0 ranks=2 count=65536
allreduce ok rank=1 ranks=2 count=65536
p2p bytes=65536 iters=20 window=8 seconds=2.500 MBps=4.194
`

func TestParseMPI(t *testing.T) {
	r, err := parseMPI(mpiOut)
	if err != nil {
		t.Fatal(err)
	}
	if r.ranksOK != 2 || r.mbps != 4.194 {
		t.Errorf("ranks %d, MB/s %v; want 2, 4.194", r.ranksOK, r.mbps)
	}
	if !slices.Equal(r.lanes["rc_verbs"], []string{"rxe0:1"}) || !slices.Equal(r.lanes["self"], []string{"memory0"}) || len(r.lanes) != 2 {
		t.Errorf("lanes %v", r.lanes)
	}
	for name, out := range map[string]string{
		"no p2p line":  strings.Replace(mpiOut, "p2p bytes", "p2p_bytes", 1),
		"wrong result": mpiOut + "allreduce FAILED rank=1 index=3 got=1 want=9\n",
		"wrong bytes":  mpiOut + "p2p FAILED: byte 3 is 1, rank 0 sent 0\n",
	} {
		if _, err := parseMPI(out); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	r, _ = parseMPI(strings.ReplaceAll(mpiOut, "rc_verbs/rxe0:1", "tcp/eth0"))
	if len(r.lanes["tcp"]) != 1 || len(r.lanes["rc_verbs"]) != 0 {
		t.Errorf("a tcp lane: %v", r.lanes)
	}
	r, _ = parseMPI(strings.Replace(mpiOut, "allreduce ok rank=1", "allreduce ok? rank=1", 1))
	if r.ranksOK != 1 {
		t.Errorf("one rank's line broken: %d ranks ok", r.ranksOK)
	}
}

// TestSSHECDSAAuthorizedKey decodes the authorized_keys line as sshd and dropbear do (RFC
// 4253 strings) and compares the point with the key's.
func TestSSHECDSAAuthorizedKey(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := key.PublicKey.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	typ, b64, ok := strings.Cut(sshECDSAAuthorizedKey(pub.Bytes()), " ")
	if !ok || typ != "ecdsa-sha2-nistp256" {
		t.Fatalf("key type %q", typ)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("truncated length")
		}
		n := binary.BigEndian.Uint32(b)
		if int(n) > len(b)-4 {
			t.Fatalf("string of %d bytes, %d left", n, len(b)-4)
		}
		fields, b = append(fields, string(b[4:4+n])), b[4+n:]
	}
	if len(fields) != 3 || fields[0] != typ || fields[1] != "nistp256" || fields[2] != string(pub.Bytes()) {
		t.Errorf("fields %q", fields[:min(2, len(fields))])
	}
	if s, err := mpiSSHSecret("ns"); err != nil || !strings.Contains(string(s.Data["id_ecdsa"]), "BEGIN EC PRIVATE KEY") ||
		!strings.HasPrefix(string(s.Data["authorized_keys"]), "ecdsa-sha2-nistp256 ") {
		t.Errorf("secret %v %v", s, err)
	}
}
