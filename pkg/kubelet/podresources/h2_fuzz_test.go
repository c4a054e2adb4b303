package podresources

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// response frames a well-formed answer: SETTINGS, HEADERS (its block cut
// into CONTINUATION fragments of at most frag bytes), the message in DATA
// frames of at most chunk bytes, trailers.
func responseFrames(msg []byte, frag, chunk int, status string) []byte {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	writeFrame(w, frameSettings, 0, 0, nil)
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	_ = enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	block := hdr.Bytes()
	for first := true; first || len(block) > 0; first = false {
		n := min(frag, len(block))
		typ, flags := byte(frameContinuation), byte(0)
		if first {
			typ = frameHeaders
		}
		if n == len(block) {
			flags |= flagEndHeaders
		}
		writeFrame(w, typ, flags, streamID, block[:n])
		block = block[n:]
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)
	for len(body) > 0 {
		n := min(chunk, len(body))
		writeFrame(w, frameData, 0, streamID, body[:n])
		body = body[n:]
	}
	hdr.Reset()
	_ = enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: status})
	writeFrame(w, frameHeaders, flagEndHeaders|flagEndStream, streamID, hdr.Bytes())
	_ = w.Flush()
	return out.Bytes()
}

// FuzzReadResponse: the HTTP/2 reader (frames, HPACK) fails or returns a
// message within MaxMessage on any bytes from the socket, never panics; a
// well-formed answer, however its header block and message are cut into
// frames, reads back as the message sent.
func FuzzReadResponse(f *testing.F) {
	f.Add(responseFrames([]byte("pods"), 1, 3, "0"), []byte("pods"), uint16(1), uint16(3))
	f.Add(responseFrames(nil, 100, 100, "14"), []byte{}, uint16(100), uint16(maxFrame))
	f.Add([]byte{0, 0, 0, frameHeaders, 0, 0, 0, 0, 1}, []byte("x"), uint16(0), uint16(0))
	f.Add([]byte{0, 0x40, 1, frameData, 0, 0, 0, 0, 1}, []byte(nil), uint16(7), uint16(9))
	f.Fuzz(func(t *testing.T, raw, msg []byte, frag, chunk uint16) {
		got, err := readResponse(bufio.NewReader(bytes.NewReader(raw)), bufio.NewWriter(io.Discard))
		if err == nil && len(got) > MaxMessage {
			t.Fatalf("readResponse returned %d bytes, over MaxMessage", len(got))
		}

		f, c := max(int(frag)%maxFrame, 1), max(int(chunk)%(maxFrame+1), 1)
		ok := responseFrames(msg, f, c, "0")
		got, err = readResponse(bufio.NewReader(bytes.NewReader(ok)), bufio.NewWriter(io.Discard))
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("well-formed answer (fragments %d, chunks %d): %q, %v; want %q", f, c, got, err, msg)
		}
		_, err = readResponse(bufio.NewReader(bytes.NewReader(responseFrames(msg, f, c, "14"))), bufio.NewWriter(io.Discard))
		if se := (*StatusError)(nil); !errors.As(err, &se) || se.Code != CodeUnavailable {
			t.Fatalf("answer with grpc-status 14: err %v", err)
		}
	})
}
