//! A TCP relay in front of a server (etcd, in the cluster tests), which can black-hole
//! requests: while it holds them, a connection whose client sends bytes containing the
//! relay's marker gets nothing forwarded from then on and never an answer, as behind a
//! member that stopped answering. Or it can swallow answers: a connection whose client sends
//! a marked chunk while it swallows has that request forwarded (the server acts on it) and
//! no answer relayed from then on, as when a member's answer is lost on the way. It counts
//! the marked chunks it forwarded. It can also
//! freeze every connection open so far (nothing more forwarded either way, the sockets
//! kept open), as a member cut off from its cluster leaves a watch.
//!
//! Threads (one to accept, two per connection) end with their connections; the accepting
//! one lives as long as the test process.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

pub struct Relay {
    pub addr: SocketAddr,
    state: Arc<State>,
}

struct State {
    target: SocketAddr,
    marker: Vec<u8>,
    holding: AtomicBool,
    swallowing: AtomicBool,
    forwarded: AtomicUsize,
    /// Connections accepted so far, and how many of the first ones are frozen.
    accepted: AtomicUsize,
    frozen: AtomicUsize,
}

impl Relay {
    /// A relay on a free loopback port to `target`, black-holing on `marker`.
    pub fn start(target: SocketAddr, marker: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a relay port");
        let addr = listener.local_addr().expect("relay address");
        let state = Arc::new(State {
            target,
            marker: marker.as_bytes().to_vec(),
            holding: AtomicBool::new(false),
            swallowing: AtomicBool::new(false),
            forwarded: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            frozen: AtomicUsize::new(0),
        });
        let accepting = Arc::clone(&state);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let state = Arc::clone(&accepting);
                let number = state.accepted.fetch_add(1, Ordering::SeqCst) + 1;
                std::thread::spawn(move || relay(client, &state, number));
            }
        });
        Relay { addr, state }
    }

    /// Black-holes marked requests from now on (`true`) or forwards them again.
    pub fn hold(&self, holding: bool) {
        self.state.holding.store(holding, Ordering::SeqCst);
    }

    /// Swallows the answers to marked requests from now on (`true`), or relays them again.
    pub fn swallow(&self, swallowing: bool) {
        self.state.swallowing.store(swallowing, Ordering::SeqCst);
    }

    /// Freezes every connection open so far; later ones are relayed as before.
    pub fn freeze(&self) {
        self.state.frozen.store(self.state.accepted.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// How many chunks containing the marker were forwarded so far.
    pub fn forwarded(&self) -> usize {
        self.state.forwarded.load(Ordering::SeqCst)
    }
}

fn relay(client: TcpStream, state: &Arc<State>, number: usize) {
    let Ok(server) = TcpStream::connect(state.target) else { return };
    let (Ok(mut client_reader), Ok(mut server_writer)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let (mut server_reader, mut client_writer) = (server, client);
    let answering = Arc::clone(state);
    let swallowed = Arc::new(AtomicBool::new(false));
    let swallowing = Arc::clone(&swallowed);
    let answers = std::thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(read) = server_reader.read(&mut buffer) {
            let frozen =
                number <= answering.frozen.load(Ordering::SeqCst) || swallowing.load(Ordering::SeqCst);
            if read == 0 || (!frozen && client_writer.write_all(&buffer[..read]).is_err()) {
                break;
            }
        }
        let _ = client_writer.shutdown(Shutdown::Write);
    });
    let mut buffer = vec![0u8; 64 * 1024];
    let mut black_holed = false;
    while let Ok(read) = client_reader.read(&mut buffer) {
        if read == 0 {
            break;
        }
        let chunk = &buffer[..read];
        let marked = chunk.windows(state.marker.len()).any(|window| window == state.marker);
        black_holed |= marked && state.holding.load(Ordering::SeqCst);
        if marked && state.swallowing.load(Ordering::SeqCst) {
            swallowed.store(true, Ordering::SeqCst);
        }
        if black_holed || number <= state.frozen.load(Ordering::SeqCst) {
            continue;
        }
        if server_writer.write_all(chunk).is_err() {
            break;
        }
        if marked {
            state.forwarded.fetch_add(1, Ordering::SeqCst);
        }
    }
    let _ = server_writer.shutdown(Shutdown::Both);
    let _ = answers.join();
}
