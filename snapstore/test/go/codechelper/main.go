// codechelper runs Go's own compress/{lzw,gzip,zlib} so tests can check our codecs against the real thing.
//
//	codechelper decode <lzw|gzip|zlib>            stdin compressed -> prints "<sha256 hex> <length>"
//	codechelper encode <lzw|gzip|zlib>            stdin raw -> compressed bytes on stdout
//	codechelper encode-prefixes <codec> <from> <to>
//	                                              stdin raw -> for every n in [from, to): the sha256 of the
//	                                              encoding of the first n bytes, one hex digest per line
//
// The codecs are set up exactly as etcd-backup-restore v0.23 does: lzw.NewWriter(w, lzw.LSB, 8),
// gzip.NewWriter(w) and zlib.NewWriter(w) (default levels).
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/lzw"
	"compress/zlib"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
)

func newWriter(codec string, w io.Writer) io.WriteCloser {
	switch codec {
	case "lzw":
		return lzw.NewWriter(w, lzw.LSB, 8)
	case "gzip":
		return gzip.NewWriter(w)
	case "zlib":
		return zlib.NewWriter(w)
	}
	fail(fmt.Errorf("unknown codec %q", codec))
	return nil
}

func newReader(codec string, r io.Reader) io.ReadCloser {
	switch codec {
	case "lzw":
		return lzw.NewReader(r, lzw.LSB, 8)
	case "gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			fail(err)
		}
		return zr
	case "zlib":
		zr, err := zlib.NewReader(r)
		if err != nil {
			fail(err)
		}
		return zr
	}
	fail(fmt.Errorf("unknown codec %q", codec))
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "codechelper:", err)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 3 {
		fail(fmt.Errorf("usage: codechelper decode|encode|encode-prefixes <codec> [from to]"))
	}
	mode, codec := os.Args[1], os.Args[2]
	switch mode {
	case "decode":
		r := newReader(codec, bufio.NewReader(os.Stdin))
		h := sha256.New()
		n, err := io.Copy(h, r)
		if err != nil {
			fail(err)
		}
		if err := r.Close(); err != nil {
			fail(err)
		}
		fmt.Printf("%s %d\n", hex.EncodeToString(h.Sum(nil)), n)
	case "encode":
		out := bufio.NewWriter(os.Stdout)
		w := newWriter(codec, out)
		if _, err := io.Copy(w, os.Stdin); err != nil {
			fail(err)
		}
		if err := w.Close(); err != nil {
			fail(err)
		}
		if err := out.Flush(); err != nil {
			fail(err)
		}
	case "encode-prefixes":
		if len(os.Args) != 5 {
			fail(fmt.Errorf("encode-prefixes needs <from> <to>"))
		}
		from, err1 := strconv.Atoi(os.Args[3])
		to, err2 := strconv.Atoi(os.Args[4])
		if err1 != nil || err2 != nil {
			fail(fmt.Errorf("bad range %q %q", os.Args[3], os.Args[4]))
		}
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			fail(err)
		}
		if from < 0 || to > len(data)+1 || from > to {
			fail(fmt.Errorf("range [%d, %d) outside input of %d bytes", from, to, len(data)))
		}
		out := bufio.NewWriter(os.Stdout)
		var buf bytes.Buffer
		for n := from; n < to; n++ {
			buf.Reset()
			w := newWriter(codec, &buf)
			if _, err := w.Write(data[:n]); err != nil {
				fail(err)
			}
			if err := w.Close(); err != nil {
				fail(err)
			}
			sum := sha256.Sum256(buf.Bytes())
			fmt.Fprintln(out, hex.EncodeToString(sum[:]))
		}
		if err := out.Flush(); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown mode %q", mode))
	}
}
