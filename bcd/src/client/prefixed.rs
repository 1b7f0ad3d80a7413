//! [`Prefixed`]: a stream with bytes already read from it put back in front (the connector reads
//! the gateway's first bytes before handing the stream to hyper).

use std::pin::Pin as BoxPin;
use std::task::{Context, Poll};

/// A stream with bytes already read from it put back in front.
pub struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(super) fn new(prefix: Vec<u8>, inner: S) -> Prefixed<S> {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Prefixed<S> {
    fn poll_read(
        self: BoxPin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        BoxPin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: BoxPin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        BoxPin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_flush(self: BoxPin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        BoxPin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: BoxPin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        BoxPin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: BoxPin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        BoxPin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
