//! bcd, the node agent: joins a machine, keeps its identity files, renews and holds the session.
//!
//! It talks to the control plane only through the wire API and never trusts a response it has not
//! verified against its pins.

fn main() {
    eprintln!("bcd: the node agent is not built yet");
    std::process::exit(2);
}
