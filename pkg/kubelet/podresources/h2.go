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

	settingMaxHeaderListSize = 0x6

	preface  = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	streamID = 1
)

// The limits the client advertises in its SETTINGS, and holds the kubelet
// to: anything larger is a broken or hostile peer, and the call fails with
// ErrLimit before it reads or decodes more.
const (
	// maxFrame is SETTINGS_MAX_FRAME_SIZE, left at its default (RFC 9113
	// 6.5.2): a frame's payload.
	maxFrame = 16 << 10
	// maxHeaderList is the SETTINGS_MAX_HEADER_LIST_SIZE advertised: it
	// bounds a header block as received (HEADERS and its CONTINUATION
	// fragments), the block decoded (names and values plus 32 bytes per
	// field, RFC 9113 6.5.2) and so every HPACK string in it.
	maxHeaderList = 64 << 10
)

// ErrLimit is wrapped by the error of a call whose answer exceeds a limit
// the client advertised (frame size, header list size) or its MaxMessage.
var ErrLimit = errors.New("exceeds the client's advertised limit")

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
	var settings [6]byte
	binary.BigEndian.PutUint16(settings[0:2], settingMaxHeaderListSize)
	binary.BigEndian.PutUint32(settings[2:6], maxHeaderList)
	writeFrame(w, frameSettings, 0, 0, settings[:])
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
	inBlock  bool   // a HEADERS came without END_HEADERS
	body     []byte
	ended    bool

	// The header block being decoded: its fields and their size.
	fields   map[string]string
	listSize int
}

// readResponse reads frames until the stream ends and returns the message.
func readResponse(r *bufio.Reader, w *bufio.Writer) ([]byte, error) {
	s := &response{w: w}
	s.dec = hpack.NewDecoder(4096, s.emit)
	s.dec.SetMaxStringLength(maxHeaderList)
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
		return 0, 0, 0, nil, fmt.Errorf("frame of %d bytes: larger than %d: %w", n, maxFrame, ErrLimit)
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
		return fmt.Errorf("response larger than %d bytes: %w", MaxMessage, ErrLimit)
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
	switch {
	case typ == frameContinuation && !s.inBlock:
		return errors.New("CONTINUATION without HEADERS")
	case typ == frameHeaders && s.inBlock:
		return errors.New("HEADERS inside a header block")
	}
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
	if len(s.block)+len(frag) > maxHeaderList {
		return fmt.Errorf("header block larger than %d bytes: %w", maxHeaderList, ErrLimit)
	}
	s.block = append(s.block, frag...)
	s.inBlock = flags&flagEndHeaders == 0
	if s.inBlock {
		return nil
	}
	m, err := s.decodeBlock()
	if err != nil {
		return err
	}
	if s.headers == nil {
		s.headers = m
	} else {
		s.trailers = m
	}
	return nil
}

// decodeBlock decodes the assembled header block into a map, failing when
// the fields add up to more than maxHeaderList: a small block of indexed
// fields can name a large dynamic table entry many times.
func (s *response) decodeBlock() (map[string]string, error) {
	s.fields, s.listSize = map[string]string{}, 0
	s.dec.SetEmitEnabled(true)
	_, err := s.dec.Write(s.block)
	if err == nil {
		err = s.dec.Close()
	}
	s.block = s.block[:0]
	if s.listSize > maxHeaderList {
		return nil, fmt.Errorf("header list larger than %d bytes: %w", maxHeaderList, ErrLimit)
	}
	if errors.Is(err, hpack.ErrStringLength) {
		return nil, fmt.Errorf("decode headers: %w: %w", err, ErrLimit)
	}
	if err != nil {
		return nil, fmt.Errorf("decode headers: %w", err)
	}
	return s.fields, nil
}

// emit is the HPACK decoder's callback: it keeps a field until the list
// passes maxHeaderList, then keeps none (decodeBlock fails the call).
func (s *response) emit(f hpack.HeaderField) {
	s.listSize += int(f.Size())
	if s.listSize > maxHeaderList {
		s.dec.SetEmitEnabled(false)
		return
	}
	s.fields[f.Name] = f.Value
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
