package podresources

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2/hpack"
)

// HTTP/2 (RFC 9113) frame types and flags used by one unary gRPC call.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	preface  = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	streamID = 1
	maxFrame = 1 << 24
)

// unary makes one gRPC call on a fresh connection to the unix socket and
// returns the response message. It speaks just enough HTTP/2 for that: the
// preface, SETTINGS (acknowledged), one request stream, flow control for the
// response, PING replies.
func unary(ctx context.Context, socket, method string, msg []byte) ([]byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultTimeout)
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Cancelled: a deadline in the past ends the reads; the call may have
	// closed conn by then.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/v1.PodResourcesLister/" + method}, {Name: ":authority", Value: "localhost"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		// Rounded up, so that the kubelet's deadline passes after ours.
		{Name: "grpc-timeout", Value: strconv.FormatInt(int64(max((time.Until(deadline)+time.Millisecond-1)/time.Millisecond, 1)), 10) + "m"},
	} {
		_ = enc.WriteField(f) // into a bytes.Buffer: cannot fail
	}
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)

	w := bufio.NewWriter(conn)
	w.WriteString(preface)
	writeFrame(w, frameSettings, 0, 0, nil)
	writeFrame(w, frameHeaders, flagEndHeaders, streamID, hdr.Bytes())
	writeFrame(w, frameData, flagEndStream, streamID, body)
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return readResponse(bufio.NewReader(conn), w)
}

func writeFrame(w *bufio.Writer, typ, flags byte, stream uint32, payload []byte) {
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream&0x7fffffff)
	w.Write(h[:])
	w.Write(payload)
}

func windowUpdate(w *bufio.Writer, stream uint32, n int) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	writeFrame(w, frameWindowUpdate, 0, stream, b[:])
}

// response is the state of one response stream while its frames are read.
type response struct {
	w        *bufio.Writer
	dec      *hpack.Decoder
	headers  map[string]string
	trailers map[string]string
	block    []byte // header block being assembled across CONTINUATION
	body     []byte
	ended    bool
}

// readResponse reads frames until the stream ends and returns the message.
func readResponse(r *bufio.Reader, w *bufio.Writer) ([]byte, error) {
	s := &response{w: w, dec: hpack.NewDecoder(4096, nil)}
	for !s.ended {
		typ, flags, stream, payload, err := readFrame(r)
		if err != nil {
			return nil, err
		}
		if err := s.handle(typ, flags, stream, payload); err != nil {
			return nil, err
		}
		// A frame that wrote nothing leaves the buffer empty: this is then a no-op.
		if err := w.Flush(); err != nil {
			return nil, err
		}
	}
	return s.message()
}

// readFrame reads one frame's header and payload.
func readFrame(r *bufio.Reader) (typ, flags byte, stream uint32, payload []byte, err error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, 0, nil, fmt.Errorf("read frame: %w", err)
	}
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	typ, flags = h[3], h[4]
	stream = binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
	if n > maxFrame {
		return 0, 0, 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, 0, 0, nil, fmt.Errorf("read frame: %w", err)
	}
	return typ, flags, stream, payload, nil
}

// handle acts on one frame by its type; frame types not listed are ignored.
func (s *response) handle(typ, flags byte, stream uint32, payload []byte) error {
	switch typ {
	case frameSettings:
		if flags&flagAck == 0 {
			writeFrame(s.w, frameSettings, flagAck, 0, nil)
		}
	case framePing:
		if flags&flagAck == 0 {
			writeFrame(s.w, framePing, flagAck, 0, payload)
		}
	case frameGoAway:
		return errors.New("kubelet closed the connection (GOAWAY)")
	case frameRSTStream:
		if stream == streamID {
			return fmt.Errorf("kubelet reset the stream (code %d)", binary.BigEndian.Uint32(append(payload, 0, 0, 0, 0)))
		}
	case frameData:
		if stream == streamID {
			return s.onData(flags, payload)
		}
	case frameHeaders, frameContinuation:
		if stream == streamID {
			return s.onHeaders(typ, flags, payload)
		}
	}
	return nil
}

// onData appends a DATA frame of our stream to the body and gives the window back.
func (s *response) onData(flags byte, payload []byte) error {
	data, err := unpad(flags, payload)
	if err != nil {
		return err
	}
	s.body = append(s.body, data...)
	if len(s.body) > MaxMessage+5 {
		return fmt.Errorf("response larger than %d bytes", MaxMessage)
	}
	if n := len(payload); n > 0 { // give the window back so a large answer keeps coming
		windowUpdate(s.w, 0, n)
		windowUpdate(s.w, streamID, n)
	}
	s.ended = flags&flagEndStream != 0
	return nil
}

// onHeaders assembles a HEADERS or CONTINUATION fragment of our stream and,
// at END_HEADERS, decodes the block as the headers, or the trailers if
// headers came already.
func (s *response) onHeaders(typ, flags byte, payload []byte) error {
	frag := payload
	if typ == frameHeaders {
		var err error
		if frag, err = unpad(flags, payload); err != nil {
			return err
		}
		if flags&flagPriority != 0 {
			if len(frag) < 5 {
				return errors.New("short HEADERS frame")
			}
			frag = frag[5:]
		}
		s.ended = flags&flagEndStream != 0
	}
	s.block = append(s.block, frag...)
	if flags&flagEndHeaders == 0 {
		return nil
	}
	fields, err := s.dec.DecodeFull(s.block)
	if err != nil {
		return fmt.Errorf("decode headers: %w", err)
	}
	s.block = nil
	m := map[string]string{}
	for _, f := range fields {
		m[f.Name] = f.Value
	}
	if s.headers == nil {
		s.headers = m
	} else {
		s.trailers = m
	}
	return nil
}

// message checks the HTTP and gRPC status of the ended stream and returns
// the single uncompressed message in its body.
func (s *response) message() ([]byte, error) {
	headers, trailers, body := s.headers, s.trailers, s.body
	if headers[":status"] != "200" {
		return nil, fmt.Errorf("kubelet answered HTTP %s", headers[":status"])
	}
	for _, m := range []map[string]string{headers, trailers} { // trailers-only answers carry the status in headers
		if err := grpcStatus(m); err != nil {
			return nil, err
		}
	}
	if headers["grpc-status"] == "" && trailers["grpc-status"] == "" {
		return nil, errors.New("grpc response without a status")
	}
	if len(body) < 5 {
		return nil, errors.New("grpc response without a message")
	}
	if body[0] != 0 {
		return nil, errors.New("grpc response is compressed")
	}
	if l := binary.BigEndian.Uint32(body[1:5]); int(l) != len(body)-5 {
		return nil, fmt.Errorf("grpc response length %d, got %d bytes", l, len(body)-5)
	}
	return body[5:], nil
}

func unpad(flags byte, p []byte) ([]byte, error) {
	if flags&flagPadded == 0 {
		return p, nil
	}
	if len(p) < 1 || int(p[0]) >= len(p) {
		return nil, errors.New("bad padding")
	}
	return p[1 : len(p)-int(p[0])], nil
}

func grpcStatus(m map[string]string) error {
	s, ok := m["grpc-status"]
	if !ok {
		return nil
	}
	code, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("bad grpc-status %q", s)
	}
	if code == CodeOK {
		return nil
	}
	return &StatusError{Code: code, Message: unescapeMessage(m["grpc-message"])}
}

// unescapeMessage undoes the percent-encoding gRPC gives grpc-message (every
// byte outside printable ASCII, and '%'); a malformed escape stays as it is,
// as grpc-go leaves it.
func unescapeMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}
