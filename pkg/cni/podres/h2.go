package podres

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

	preface   = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	streamID  = 1
	maxFrame  = 1 << 24
	callLimit = 30 * time.Second // when ctx has no deadline
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
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(callLimit)
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/v1.PodResourcesLister/" + method}, {Name: ":authority", Value: "localhost"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "grpc-timeout", Value: strconv.FormatInt(max(time.Until(deadline).Milliseconds(), 1), 10) + "m"},
	} {
		enc.WriteField(f)
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

// readResponse reads frames until the stream ends and returns the message.
func readResponse(r *bufio.Reader, w *bufio.Writer) ([]byte, error) {
	dec := hpack.NewDecoder(4096, nil)
	var headers, trailers map[string]string
	var block []byte // header block being assembled across CONTINUATION
	var body []byte
	ended := false
	for !ended {
		var h [9]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return nil, fmt.Errorf("read frame: %w", err)
		}
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		typ, flags := h[3], h[4]
		stream := binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
		if n > maxFrame {
			return nil, fmt.Errorf("frame of %d bytes", n)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return nil, fmt.Errorf("read frame: %w", err)
		}
		switch typ {
		case frameSettings:
			if flags&flagAck == 0 {
				writeFrame(w, frameSettings, flagAck, 0, nil)
			}
		case framePing:
			if flags&flagAck == 0 {
				writeFrame(w, framePing, flagAck, 0, payload)
			}
		case frameGoAway:
			return nil, errors.New("kubelet closed the connection (GOAWAY)")
		case frameRSTStream:
			if stream == streamID {
				return nil, fmt.Errorf("kubelet reset the stream (code %d)", binary.BigEndian.Uint32(append(payload, 0, 0, 0, 0)))
			}
		case frameData:
			if stream != streamID {
				continue
			}
			data, err := unpad(flags, payload)
			if err != nil {
				return nil, err
			}
			body = append(body, data...)
			if len(body) > maxMessage+5 {
				return nil, fmt.Errorf("response larger than %d bytes", maxMessage)
			}
			if n > 0 { // give the window back so a large answer keeps coming
				windowUpdate(w, 0, n)
				windowUpdate(w, streamID, n)
			}
			ended = flags&flagEndStream != 0
		case frameHeaders, frameContinuation:
			if stream != streamID {
				continue
			}
			frag := payload
			if typ == frameHeaders {
				var err error
				if frag, err = unpad(flags, payload); err != nil {
					return nil, err
				}
				if flags&flagPriority != 0 {
					if len(frag) < 5 {
						return nil, errors.New("short HEADERS frame")
					}
					frag = frag[5:]
				}
				ended = flags&flagEndStream != 0
			}
			block = append(block, frag...)
			if flags&flagEndHeaders == 0 {
				continue
			}
			fields, err := dec.DecodeFull(block)
			if err != nil {
				return nil, fmt.Errorf("decode headers: %w", err)
			}
			block = nil
			m := map[string]string{}
			for _, f := range fields {
				m[f.Name] = f.Value
			}
			if headers == nil {
				headers = m
			} else {
				trailers = m
			}
		}
		if err := w.Flush(); err != nil {
			return nil, err
		}
	}
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
	if code == codeOK {
		return nil
	}
	return &StatusError{Code: code, Message: m["grpc-message"]}
}
