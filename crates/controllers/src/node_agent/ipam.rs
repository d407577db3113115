//! Pod addresses from a node's `/24` pod CIDR, handed out as the `host-local` CNI plugin
//! does: the network's `.1` is the gateway, pods get `.2` to `.254`, and each allocation
//! continues after the last one, so a freed address is not reused at once.

use std::net::Ipv4Addr;

/// The first host part given to pods (`.1` is the bridge's gateway).
const FIRST: u8 = 2;
/// The last host part given to pods (`.255` is the broadcast address).
const LAST: u8 = 254;

/// The addresses of one node's pod CIDR.
#[derive(Debug, Clone)]
pub(crate) struct IpAllocator {
    network: u32,
    used: [u64; 4],
    last: u8,
}

impl IpAllocator {
    /// An allocator for the `/24` whose network address is `network` (host bits ignored).
    pub(crate) fn new(network: Ipv4Addr) -> IpAllocator {
        IpAllocator {
            network: u32::from(network) & !0xff,
            used: [0; 4],
            last: LAST,
        }
    }

    fn is_used(&self, host: u8) -> bool {
        self.used[usize::from(host / 64)] & (1 << (host % 64)) != 0
    }

    fn set(&mut self, host: u8, used: bool) {
        let word = &mut self.used[usize::from(host / 64)];
        if used {
            *word |= 1 << (host % 64);
        } else {
            *word &= !(1 << (host % 64));
        }
    }

    /// The next free address, now reserved; `None` if all 253 are in use.
    pub(crate) fn allocate(&mut self) -> Option<Ipv4Addr> {
        let mut host = self.last;
        for _ in FIRST..=LAST {
            host = if host >= LAST { FIRST } else { host + 1 };
            if !self.is_used(host) {
                self.set(host, true);
                self.last = host;
                return Some(Ipv4Addr::from(self.network | u32::from(host)));
            }
        }
        None
    }

    /// Marks `ip` as in use (an address found in a pod's status after a restart). Returns
    /// false if it is not a pod address of this network.
    pub(crate) fn reserve(&mut self, ip: Ipv4Addr) -> bool {
        match self.host_part(ip) {
            Some(host) => {
                self.set(host, true);
                true
            }
            None => false,
        }
    }

    /// Frees `ip` (addresses of other networks are ignored).
    pub(crate) fn release(&mut self, ip: Ipv4Addr) {
        if let Some(host) = self.host_part(ip) {
            self.set(host, false);
        }
    }

    fn host_part(&self, ip: Ipv4Addr) -> Option<u8> {
        let ip = u32::from(ip);
        let host = (ip & 0xff) as u8;
        (ip & !0xff == self.network && (FIRST..=LAST).contains(&host)).then_some(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_round_robin_and_exhausts() {
        let mut a = IpAllocator::new(Ipv4Addr::new(10, 244, 3, 0));
        assert_eq!(a.allocate(), Some(Ipv4Addr::new(10, 244, 3, 2)));
        assert_eq!(a.allocate(), Some(Ipv4Addr::new(10, 244, 3, 3)));
        a.release(Ipv4Addr::new(10, 244, 3, 2));
        // Not reused at once.
        assert_eq!(a.allocate(), Some(Ipv4Addr::new(10, 244, 3, 4)));
        assert!(a.reserve(Ipv4Addr::new(10, 244, 3, 5)));
        assert!(!a.reserve(Ipv4Addr::new(10, 244, 4, 5)));
        assert!(!a.reserve(Ipv4Addr::new(10, 244, 3, 255)));
        assert_eq!(a.allocate(), Some(Ipv4Addr::new(10, 244, 3, 6)));
        let mut n = 4; // .3 .4 .5 .6 in use
        while a.allocate().is_some() {
            n += 1;
        }
        assert_eq!(n, 253);
        a.release(Ipv4Addr::new(10, 244, 3, 100));
        assert_eq!(a.allocate(), Some(Ipv4Addr::new(10, 244, 3, 100)));
    }
}
