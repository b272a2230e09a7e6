package hbload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// Framing and flow control of a RawStream.
const (
	// rawStreamID is the one stream of a RawStream's connection.
	rawStreamID = 1
	// defaultRecvWindow is the receive window a RawStream advertises for
	// its stream and its connection: an answer is some 30 bytes, so 16 MiB
	// is half a million answers, and the server never waits for a
	// WINDOW_UPDATE while the reader keeps up.
	defaultRecvWindow = 16 << 20
	// initialWindow and initialMaxFrame are HTTP/2's defaults, in force
	// until the server's SETTINGS say otherwise.
	initialWindow   = 65535
	initialMaxFrame = 16384
	// maxAnswer bounds the length an answer's gRPC prefix may claim; a
	// HeartbeatResponse is under 100 bytes.
	maxAnswer = 64 << 10
)

// errClosed is why a stream that Close ended did not end by itself.
var errClosed = errors.New("closed before the stream ended")

// RawStream is one HeartbeatStream on its own HTTP/2 connection (h2c: no
// TLS), written with golang.org/x/net/http2's Framer instead of grpc-go's
// client, whose CPU per message is several µs: the load generator of a
// bench shares the machine with the server it measures.
//
// On the wire it is what grpc-go's client sends under load: each
// heartbeat is its own gRPC message (5-byte prefix, then the protobuf
// HeartbeatRequest) in its own DATA frame, and the frames of a batch go
// out in one write, as grpc-go's loopy writer coalesces them. It honours
// the server's flow control (SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_UPDATE)
// and MAX_FRAME_SIZE, acknowledges its SETTINGS and PINGs, and advertises
// a large receive window that it replenishes as answers are read.
//
// A goroutine reads the answers into the Counts given to DialRaw until
// the stream ends: with the server's trailers (a non-OK grpc-status is
// one StreamErrs), a RST_STREAM, a GOAWAY that leaves the stream out, a
// broken connection or Close (each one StreamErrs). Done is closed then.
//
// Send and CloseSend are called from one goroutine at a time, as
// grpc-go's SendMsg and CloseSend; Done, Err and Close from any.
type RawStream struct {
	// Read-only after DialRaw.
	conn   net.Conn
	where  string // "hbload: HeartbeatStream to ADDR", for errors
	counts *Counts
	opts   rawOptions
	done   chan struct{} // closed when the reader has returned
	wake   chan struct{} // 1 slot: a send window grew, or the stream ended

	// wmu serializes writes: Send's batches, CloseSend and the reader's
	// acknowledgements and WINDOW_UPDATEs. fr reads only in the reader,
	// which the Framer allows alongside writes.
	wmu sync.Mutex
	fr  *http2.Framer
	out outBuf // the frames of one write
	msg []byte // the message Send is framing

	// mu guards the send windows and the stream's state.
	mu         sync.Mutex
	connWin    int64  // what the connection may still send
	streamWin  int64  // what the stream may still send (may go negative on a SETTINGS change)
	initWin    int64  // the server's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame   uint32 // the server's SETTINGS_MAX_FRAME_SIZE
	sendClosed bool
	ended      bool
	err        error // why the stream ended, once ended; nil for status OK
	cause      error // the first reason the connection was closed from this side

	// Reader only.
	unacked    uint32 // received bytes not yet given back by WINDOW_UPDATE
	partial    []byte // the start of an answer cut at a DATA frame's end
	httpStatus string // the response headers' :status
}

// rawOptions are the test seams of dialRaw.
type rawOptions struct {
	// recvWindow is the receive window to advertise; zero means
	// defaultRecvWindow.
	recvWindow uint32
	// onWait, or nil, is called each time Send waits for a send window.
	onWait func()
}

// outBuf collects the Framer's frames until one Write sends them.
type outBuf struct{ b []byte }

func (o *outBuf) Write(p []byte) (int, error) {
	o.b = append(o.b, p...)
	return len(p), nil
}

// DialRaw connects to addr (host:port, plain TCP: HTTP/2 without TLS, as
// grpc-go's insecure credentials) and opens one HeartbeatStream on it,
// whose answers are counted into c until the stream ends. ctx bounds the
// dial and the opening only.
func DialRaw(ctx context.Context, addr string, c *Counts) (*RawStream, error) {
	return dialRaw(ctx, addr, c, rawOptions{})
}

func dialRaw(ctx context.Context, addr string, c *Counts, opts rawOptions) (*RawStream, error) {
	if opts.recvWindow == 0 {
		opts.recvWindow = defaultRecvWindow
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("hbload: dial %s: %w", addr, err)
	}
	s := &RawStream{
		conn:      conn,
		where:     "hbload: HeartbeatStream to " + addr,
		counts:    c,
		opts:      opts,
		done:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		connWin:   initialWindow,
		streamWin: initialWindow,
		initWin:   initialWindow,
		maxFrame:  initialMaxFrame,
	}
	s.fr = http2.NewFramer(&s.out, bufio.NewReaderSize(conn, 64<<10))
	s.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	s.fr.SetReuseFrames()
	s.fr.SetMaxReadFrameSize(initialMaxFrame)

	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: pb.Registry_HeartbeatStream_FullMethodName},
		{Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
		{Name: "user-agent", Value: "spillway-hbload"},
	} {
		enc.WriteField(f) // writes to a bytes.Buffer: cannot fail
	}
	s.out.b = append(s.out.b, http2.ClientPreface...)
	err = s.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: opts.recvWindow},
	)
	if err == nil && opts.recvWindow > initialWindow {
		err = s.fr.WriteWindowUpdate(0, opts.recvWindow-initialWindow)
	}
	if err == nil {
		err = s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: rawStreamID, BlockFragment: hdr.Bytes(), EndHeaders: true})
	}
	if err == nil {
		err = s.flushLocked(ctx) // nobody else writes yet
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: open: %w", s.where, err)
	}
	go s.read()
	return s, nil
}

// Send sends one heartbeat per lease id of ids, in order. The frames the
// server's flow-control windows allow go out in one write: a batch is one
// write unless the windows cut it. While a window is exhausted Send waits
// for the server's WINDOW_UPDATE or SETTINGS, the stream's end, or ctx.
//
// It returns how many heartbeats it wrote; with an error the rest were
// not. A write that ctx interrupts, or that fails, ends the stream.
func (s *RawStream) Send(ctx context.Context, ids []string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%s: send: %w", s.where, err)
	}
	sent := 0
	for sent < len(ids) {
		n, err := s.reserve(ctx, ids[sent:])
		if err != nil {
			return sent, err
		}
		if err := s.writeBatch(ctx, ids[sent:sent+n]); err != nil {
			return sent, err
		}
		sent += n
	}
	return sent, nil
}

// reserve waits until the send windows take the first heartbeats of ids,
// takes them and returns how many fit.
func (s *RawStream) reserve(ctx context.Context, ids []string) (int, error) {
	for {
		s.mu.Lock()
		n, err := s.take(ids)
		s.mu.Unlock()
		if n > 0 || err != nil {
			return n, err
		}
		if s.opts.onWait != nil {
			s.opts.onWait()
		}
		select {
		case <-s.wake:
		case <-s.done:
		case <-ctx.Done():
			return 0, fmt.Errorf("%s: waiting for the server's flow-control window: %w", s.where, ctx.Err())
		}
	}
}

// take takes the send windows for the longest start of ids that fits
// them and returns its length; s.mu is held.
func (s *RawStream) take(ids []string) (int, error) {
	switch {
	case s.ended && s.err != nil:
		return 0, fmt.Errorf("send after the stream ended: %w", s.err)
	case s.ended:
		return 0, fmt.Errorf("%s: send after the stream ended (status OK)", s.where)
	case s.sendClosed:
		return 0, fmt.Errorf("%s: send after CloseSend", s.where)
	}
	avail := min(s.connWin, s.streamWin)
	n, size := 0, int64(0)
	for _, id := range ids {
		m := int64(heartbeatLen(id))
		if m > int64(s.maxFrame) {
			return 0, fmt.Errorf("%s: lease id of %d bytes: its message of %d bytes exceeds the server's MAX_FRAME_SIZE %d", s.where, len(id), m, s.maxFrame)
		}
		if size+m > avail {
			break
		}
		size += m
		n++
	}
	s.connWin -= size
	s.streamWin -= size
	return n, nil
}

// writeBatch writes one DATA frame per heartbeat of ids in one write; a
// failed write ends the stream.
func (s *RawStream) writeBatch(ctx context.Context, ids []string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, id := range ids {
		s.msg = appendHeartbeat(s.msg[:0], id)
		// Appends to s.out; fails only on an invalid stream id.
		if err := s.fr.WriteData(rawStreamID, false, s.msg); err != nil {
			return fmt.Errorf("%s: frame: %w", s.where, err)
		}
	}
	if err := s.flushLocked(ctx); err != nil {
		err = fmt.Errorf("%s: write %d heartbeats: %w", s.where, len(ids), err)
		s.abort(err)
		return err
	}
	return nil
}

// CloseSend ends the sending side with an empty DATA frame carrying
// END_STREAM; the server then ends the stream, and Done is closed once
// its trailers are read. Send after CloseSend is an error; CloseSend on
// a closed or ended stream does nothing.
func (s *RawStream) CloseSend() error {
	s.mu.Lock()
	if s.sendClosed || s.ended {
		s.mu.Unlock()
		return nil
	}
	s.sendClosed = true
	s.mu.Unlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err := s.fr.WriteData(rawStreamID, true, nil)
	if err == nil {
		err = s.flushLocked(context.Background())
	}
	if err != nil {
		err = fmt.Errorf("%s: close send: %w", s.where, err)
		s.abort(err)
	}
	return err
}

// Done is closed when the stream has ended and its answers are counted.
func (s *RawStream) Done() <-chan struct{} { return s.done }

// Err returns, once Done is closed, why the stream ended: nil if with
// grpc-status OK; a status error (status.Code works on it) if with
// another; else what broke it. Before Done is closed it returns nil.
func (s *RawStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close closes the connection and waits until the reader has stopped. A
// stream that had not ended counts one StreamErrs, as a cancelled grpc-go
// stream does in Receive. Close may be called more than once.
func (s *RawStream) Close() {
	s.abort(fmt.Errorf("%s: %w", s.where, errClosed))
	<-s.done
}

// abort closes the connection from this side; the first cause is the
// stream's error if it had not ended.
func (s *RawStream) abort(cause error) {
	s.mu.Lock()
	if s.cause == nil {
		s.cause = cause
	}
	s.mu.Unlock()
	s.conn.Close()
}

// flushLocked writes the collected frames in one Write; s.wmu is held. If
// ctx ends while the Write blocks, the Write fails.
func (s *RawStream) flushLocked(ctx context.Context) error {
	defer func() { s.out.b = s.out.b[:0] }()
	if ctx.Done() == nil {
		_, err := s.conn.Write(s.out.b)
		return err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		s.conn.SetWriteDeadline(time.Unix(1, 0))
		close(fired)
	})
	_, err := s.conn.Write(s.out.b)
	if !stop() {
		<-fired
		s.conn.SetWriteDeadline(time.Time{})
		if err != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
	}
	return err
}

// control writes the frames of write at once, under s.wmu.
func (s *RawStream) control(write func() error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err := write()
	if err == nil {
		err = s.flushLocked(context.Background())
	}
	if err != nil {
		return s.ioErr("write", err)
	}
	return nil
}

// ioErr is the error of a read or write of the connection: the cause if
// this side closed it, else err.
func (s *RawStream) ioErr(op string, err error) error {
	s.mu.Lock()
	cause := s.cause
	s.mu.Unlock()
	if cause != nil {
		return cause
	}
	return fmt.Errorf("%s: %s: %w", s.where, op, err)
}

// wakeSender tells a Send waiting for a window to look again.
func (s *RawStream) wakeSender() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// read is the reader goroutine: it reads frames until the stream ends,
// then records why and closes done.
func (s *RawStream) read() {
	err := s.readFrames()
	s.mu.Lock()
	s.ended, s.err = true, err
	s.mu.Unlock()
	if err != nil {
		s.counts.StreamErrs.Add(1)
	}
	close(s.done)
}

// readFrames handles the server's frames until the stream ends, and
// returns nil if it ended with grpc-status OK.
func (s *RawStream) readFrames() error {
	var goaway string // the server's GOAWAY, which explains a closed connection
	for {
		f, err := s.fr.ReadFrame()
		if err != nil {
			if goaway != "" {
				return s.ioErr("read after "+goaway, err)
			}
			return s.ioErr("read", err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			if err := s.onData(f); err != nil {
				return err
			}
			if f.StreamID == rawStreamID && f.StreamEnded() {
				return fmt.Errorf("%s: the server ended the stream without trailers (no grpc-status)", s.where)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != rawStreamID {
				continue
			}
			if f.StreamEnded() {
				return s.trailers(f)
			}
			s.httpStatus = f.PseudoValue("status")
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := s.onSettings(f); err != nil {
					return err
				}
			}
		case *http2.WindowUpdateFrame:
			s.mu.Lock()
			switch f.StreamID {
			case 0:
				s.connWin += int64(f.Increment)
			case rawStreamID:
				s.streamWin += int64(f.Increment)
			}
			s.mu.Unlock()
			s.wakeSender()
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				if err := s.control(func() error { return s.fr.WritePing(true, data) }); err != nil {
					return err
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == rawStreamID {
				return fmt.Errorf("%s: the server reset the stream: %v", s.where, f.ErrCode)
			}
		case *http2.GoAwayFrame:
			goaway = fmt.Sprintf("GOAWAY %v (last stream %d, %q)", f.ErrCode, f.LastStreamID, f.DebugData())
			if f.LastStreamID < rawStreamID {
				return fmt.Errorf("%s: the server refused the stream: %s", s.where, goaway)
			}
			// A graceful GOAWAY keeps the stream: it ends with its
			// trailers, or the closed connection says why.
		}
	}
}

// onSettings applies the server's SETTINGS and acknowledges them.
func (s *RawStream) onSettings(f *http2.SettingsFrame) error {
	s.mu.Lock()
	err := f.ForeachSetting(func(st http2.Setting) error {
		if err := st.Valid(); err != nil {
			return fmt.Errorf("%v: %w", st, err)
		}
		switch st.ID {
		case http2.SettingInitialWindowSize:
			s.streamWin += int64(st.Val) - s.initWin
			s.initWin = int64(st.Val)
		case http2.SettingMaxFrameSize:
			s.maxFrame = st.Val
		}
		return nil
	})
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: the server's SETTINGS: %w", s.where, err)
	}
	s.wakeSender()
	return s.control(s.fr.WriteSettingsAck)
}

// onData counts the answers of a DATA frame and gives its bytes back to
// the server's send windows once a quarter of the receive window is used.
func (s *RawStream) onData(f *http2.DataFrame) error {
	s.unacked += f.Length // padding counts too
	if s.unacked > 0 && s.unacked >= s.opts.recvWindow/4 && !f.StreamEnded() {
		inc := s.unacked
		s.unacked = 0
		err := s.control(func() error {
			if err := s.fr.WriteWindowUpdate(0, inc); err != nil {
				return err
			}
			return s.fr.WriteWindowUpdate(rawStreamID, inc)
		})
		if err != nil {
			return err
		}
	}
	if f.StreamID != rawStreamID {
		return nil
	}
	return s.consume(f.Data())
}

// consume counts the whole answers of p, a DATA frame's payload, after
// the start of an answer an earlier frame cut, and keeps the start of
// one p cuts.
func (s *RawStream) consume(p []byte) error {
	if len(s.partial) > 0 {
		s.partial = append(s.partial, p...)
		p = s.partial
	}
	for len(p) >= 5 {
		if p[0] != 0 {
			return fmt.Errorf("%s: answer with compression flag %d; none was asked for", s.where, p[0])
		}
		n := binary.BigEndian.Uint32(p[1:5])
		if n > maxAnswer {
			return fmt.Errorf("%s: answer of %d bytes, at most %d expected", s.where, n, maxAnswer)
		}
		if len(p) < 5+int(n) {
			break
		}
		found, err := answerFound(p[5 : 5+n])
		if err != nil {
			return fmt.Errorf("%s: answer: %w", s.where, err)
		}
		if found {
			s.counts.Acked.Add(1)
		} else {
			s.counts.NotFound.Add(1)
		}
		p = p[5+n:]
	}
	s.partial = append(s.partial[:0], p...) // may overlap: append moves like copy
	return nil
}

// trailers is the end of the stream: nil for grpc-status OK, else its
// status as an error.
func (s *RawStream) trailers(f *http2.MetaHeadersFrame) error {
	var code, msg string
	for _, hf := range f.Fields {
		switch hf.Name {
		case "grpc-status":
			code = hf.Value
		case "grpc-message":
			msg = hf.Value
		}
	}
	if code == "" {
		httpStatus := f.PseudoValue("status") // a trailers-only response
		if httpStatus == "" {
			httpStatus = s.httpStatus
		}
		return fmt.Errorf("%s: the stream ended without grpc-status (HTTP status %q)", s.where, httpStatus)
	}
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return fmt.Errorf("%s: the stream ended with grpc-status %q: %w", s.where, code, err)
	}
	if n == uint64(codes.OK) {
		return nil
	}
	if m, err := url.PathUnescape(msg); err == nil { // gRPC percent-encodes it
		msg = m
	}
	return fmt.Errorf("%s: %w", s.where, status.Error(codes.Code(n), msg))
}

// heartbeatLen is the length of appendHeartbeat's message for id.
func heartbeatLen(id string) int {
	if id == "" {
		return 5
	}
	return 5 + protowire.SizeTag(1) + protowire.SizeBytes(len(id))
}

// appendHeartbeat appends id's HeartbeatRequest as one gRPC message: a
// 0 compression flag, the big-endian length, then the protobuf bytes
// proto.Marshal gives (lease_id, field 1; an empty one is left out).
func appendHeartbeat(b []byte, id string) []byte {
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(heartbeatLen(id)-5))
	if id != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, id)
	}
	return b
}

// answerFound decodes the found field (2) of a HeartbeatResponse; an
// absent one is false, as in proto3.
func answerFound(m []byte) (bool, error) {
	found := false
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		m = m[n:]
		if num == 2 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(m)
			if n < 0 {
				return false, protowire.ParseError(n)
			}
			found = v != 0
			m = m[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, m)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		m = m[n:]
	}
	return found, nil
}
