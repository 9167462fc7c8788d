//! The only module that names `rdma-sys`: owned wrappers over the verbs objects the RDMA
//! transports use (device context and protection domain, completion queue with its channel,
//! registered buffer pools, shared receive queue, RC and UD queue pairs, address handles), each
//! destroyed on drop, and work requests described by plain values.
//!
//! Memory the device reads or writes is either a [`BufferPool`] (an anonymous mapping this module
//! owns, accessed only by copies, never through references, so the device's DMA never aliases a
//! Rust reference) or memory registered with [`Device::register_external`] for remote reads,
//! which the caller keeps mapped for the life of the region.

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;

use rdma_sys as sys;

/// Why an RDMA resource could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// No RDMA device at all, or a kernel without RDMA.
    #[error(
        "no RDMA device found ({0}); load a driver (real HCA) or Soft-RoCE (`rdma link add rxe0 type rxe netdev eth0`)"
    )]
    NoDevice(String),
    /// The device asked for is not there.
    #[error("RDMA device {wanted:?} not found; devices here: {found}")]
    UnknownDevice {
        /// The name asked for.
        wanted: String,
        /// The names present.
        found: String,
    },
    /// A verbs call failed.
    #[error("{what} failed: {source}")]
    Call {
        /// The call.
        what: &'static str,
        /// errno.
        source: io::Error,
    },
    /// A port that is not active.
    #[error("RDMA device {device} port {port} is not active (state {state})")]
    PortDown {
        /// Device name.
        device: String,
        /// Port.
        port: u8,
        /// The port state number.
        state: u32,
    },
}

fn call(what: &'static str) -> impl FnOnce(io::Error) -> VerbsError {
    move |source| VerbsError::Call { what, source }
}

/// `ret` is 0 on success, else an errno value (verbs calls return it directly).
fn check(what: &'static str, ret: i32) -> Result<(), VerbsError> {
    if ret == 0 {
        Ok(())
    } else {
        let errno = if ret > 0 {
            ret
        } else {
            io::Error::last_os_error().raw_os_error().unwrap_or(-ret)
        };
        Err(VerbsError::Call {
            what,
            source: io::Error::from_raw_os_error(errno),
        })
    }
}

/// An open RDMA device: its context, one protection domain, and the port used.
pub struct Device {
    ctx: *mut sys::ibv_context,
    pd: *mut sys::ibv_pd,
    name: String,
    port: u8,
    gid_index: u8,
    gid: [u8; 16],
    active_mtu: usize,
}

// SAFETY: the verbs context and PD are thread-safe objects in libibverbs; the wrapper holds no
// thread-local state.
unsafe impl Send for Device {}
// SAFETY: as above: every verbs call on a context or PD may be made from any thread.
unsafe impl Sync for Device {}

/// Names of the RDMA devices present (empty on a kernel without RDMA).
pub fn device_names() -> Result<Vec<String>, VerbsError> {
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer; the list is freed below.
    let list = unsafe { sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        let e = io::Error::last_os_error();
        let why = if e.raw_os_error() == Some(libc::ENOSYS) {
            "this kernel has no RDMA support (ibv_get_device_list: ENOSYS)".to_string()
        } else {
            format!("ibv_get_device_list: {e}")
        };
        return Err(VerbsError::NoDevice(why));
    }
    let mut names = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` valid device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` is a valid device; the name is a NUL-terminated string it owns.
        let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(dev)) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { sys::ibv_free_device_list(list) };
    Ok(names)
}

impl Device {
    /// Opens device `name` (the first one when `None`) and reads port `port`'s GID `gid_index`
    /// (when `None`: the first IPv4-mapped GID, which is RoCE v2 on Soft-RoCE and RoCE NICs,
    /// else index 0, as on InfiniBand).
    pub fn open(
        name: Option<&str>,
        port: u8,
        gid_index: Option<u8>,
    ) -> Result<Arc<Device>, VerbsError> {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer; the list is freed before returning.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(device_names().err().unwrap_or_else(|| {
                VerbsError::NoDevice("ibv_get_device_list returned nothing".into())
            }));
        }
        let mut chosen = None;
        let mut found = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` valid device pointers.
            let dev = unsafe { *list.add(i) };
            // SAFETY: `dev` is valid; its name is a NUL-terminated string it owns.
            let dev_name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if chosen.is_none() && name.is_none_or(|w| w == dev_name) {
                chosen = Some((dev, dev_name.clone()));
            }
            found.push(dev_name);
        }
        let result = match chosen {
            None if found.is_empty() => Err(VerbsError::NoDevice(
                "ibv_get_device_list found no devices".into(),
            )),
            None => Err(VerbsError::UnknownDevice {
                wanted: name.unwrap_or_default().to_string(),
                found: found.join(", "),
            }),
            // SAFETY: `dev` is a valid device from the list, which is still alive.
            Some((dev, dev_name)) => match unsafe { sys::ibv_open_device(dev) } {
                ctx if ctx.is_null() => Err(call("ibv_open_device")(io::Error::last_os_error())),
                ctx => Ok((ctx, dev_name)),
            },
        };
        // SAFETY: `list` came from ibv_get_device_list and is freed once; the opened context
        // does not depend on it.
        unsafe { sys::ibv_free_device_list(list) };
        let (ctx, dev_name) = result?;
        let mut dev = Device {
            ctx,
            pd: ptr::null_mut(),
            name: dev_name,
            port,
            gid_index: 0,
            gid: [0; 16],
            active_mtu: 0,
        };
        // SAFETY: `ctx` is an open context.
        dev.pd = unsafe { sys::ibv_alloc_pd(ctx) };
        if dev.pd.is_null() {
            return Err(call("ibv_alloc_pd")(io::Error::last_os_error()));
        }
        // SAFETY: an all-zero ibv_port_attr is a valid value (plain integers).
        let mut attr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open and `attr` a valid out-pointer of the size the call expects.
        check("ibv_query_port", unsafe {
            sys::___ibv_query_port(ctx, port, &mut attr)
        })?;
        if attr.state != sys::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(VerbsError::PortDown {
                device: dev.name.clone(),
                port,
                state: attr.state,
            });
        }
        dev.active_mtu = 128usize << attr.active_mtu;
        let query = |index: i32| -> Result<[u8; 16], VerbsError> {
            // SAFETY: a zeroed GID is valid plain data.
            let mut gid: sys::ibv_gid = unsafe { std::mem::zeroed() };
            // SAFETY: `ctx` is open and `gid` a valid out-pointer.
            check("ibv_query_gid", unsafe {
                sys::ibv_query_gid(ctx, port, index, &mut gid)
            })?;
            // SAFETY: every bit pattern of the union is a valid byte array.
            Ok(unsafe { gid.raw })
        };
        let index = match gid_index {
            Some(i) => i,
            None => (0..attr.gid_tbl_len.clamp(0, 256))
                .find(|&i| query(i).is_ok_and(|g| g[..10] == [0; 10] && g[10..12] == [0xff, 0xff]))
                .unwrap_or(0) as u8,
        };
        dev.gid_index = index;
        dev.gid = query(i32::from(index))?;
        Ok(Arc::new(dev))
    }

    /// The device's name (`rxe0`, `mlx5_0`...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The GID index in use.
    pub fn gid_index(&self) -> u8 {
        self.gid_index
    }

    /// The port in use.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// This port's GID at the chosen index.
    pub fn gid(&self) -> [u8; 16] {
        self.gid
    }

    /// The port's active MTU in bytes (the largest UD payload, GRH excluded).
    pub fn active_mtu(&self) -> usize {
        self.active_mtu
    }

    /// Registers `len` bytes at `addr` for one-sided remote reads (and local writes by the
    /// device through the registration's local key, as the buffer pools' receives do).
    ///
    /// # Safety
    /// `addr..addr + len` must be memory of this process, valid and mapped (readable and
    /// writable) for `len` bytes, and stay so, not unmapped or remapped, for as long as the
    /// returned [`MemoryRegion`] lives: the device keeps using the pages pinned now. Peers
    /// holding its key read it at any time, without synchronising with this process's
    /// threads, so it must hold nothing they may not see; and any work request that names its
    /// local key as a destination lets the device write it, which must then not alias a Rust
    /// reference.
    pub unsafe fn register_external(
        self: &Arc<Self>,
        addr: *mut u8,
        len: usize,
    ) -> Result<MemoryRegion, VerbsError> {
        let access = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        // SAFETY: the PD is valid; the kernel pins and checks the range; the device will only
        // read it on behalf of remote peers (local write access just makes the kernel pin
        // writable pages, so shared-memory holes are filled, not mapped to the zero page).
        let mr = unsafe { sys::ibv_reg_mr(self.pd, addr.cast(), len, access as i32) };
        if mr.is_null() {
            return Err(call("ibv_reg_mr")(io::Error::last_os_error()));
        }
        Ok(MemoryRegion {
            mr,
            _dev: Arc::clone(self),
        })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: the PD and context were created by `open` and are released once, after every
        // object made from them (they hold an `Arc<Device>`).
        unsafe {
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
            }
            sys::ibv_close_device(self.ctx);
        }
    }
}

/// A registered memory region; deregistered on drop.
pub struct MemoryRegion {
    mr: *mut sys::ibv_mr,
    _dev: Arc<Device>,
}

// SAFETY: an MR handle may be used and freed from any thread.
unsafe impl Send for MemoryRegion {}

impl MemoryRegion {
    /// The key peers use to read it.
    pub fn rkey(&self) -> u32 {
        // SAFETY: `mr` is a live registration.
        unsafe { (*self.mr).rkey }
    }

    fn lkey(&self) -> u32 {
        // SAFETY: `mr` is a live registration.
        unsafe { (*self.mr).lkey }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered once by this wrapper, deregistered once.
        unsafe { sys::ibv_dereg_mr(self.mr) };
    }
}

/// `count` buffers of `size` bytes in one registered anonymous mapping. Contents are moved in and
/// out by copies only: the device may be writing one buffer while another is read.
pub struct BufferPool {
    base: *mut u8,
    len: usize,
    size: usize,
    count: usize,
    mr: Option<MemoryRegion>,
}

// SAFETY: the pool owns its mapping; access goes through copies whose slots the owner
// coordinates with the device.
unsafe impl Send for BufferPool {}

impl BufferPool {
    /// Maps and registers `count` buffers of `size` bytes (local write and remote read access).
    pub fn new(dev: &Arc<Device>, count: usize, size: usize) -> Result<BufferPool, VerbsError> {
        let len = (count * size).max(1).next_multiple_of(4096);
        // SAFETY: an anonymous private mapping; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(call("mmap of a buffer pool")(io::Error::last_os_error()));
        }
        let mut pool = BufferPool {
            base: base.cast(),
            len,
            size,
            count,
            mr: None,
        };
        // SAFETY: the pool's own mapping of `len` bytes, read and write, unmapped only by
        // `drop` after the registration is dropped; its buffers are moved in and out by copies,
        // never referenced, so the device's reads and writes alias no Rust reference.
        pool.mr = Some(unsafe { dev.register_external(pool.base, len) }?);
        Ok(pool)
    }

    /// Buffers in the pool.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes per buffer.
    pub fn size(&self) -> usize {
        self.size
    }

    fn addr(&self, slot: usize, offset: usize) -> *mut u8 {
        assert!(
            slot < self.count && offset <= self.size,
            "buffer slot out of range"
        );
        // SAFETY: in bounds of the mapping, checked above.
        unsafe { self.base.add(slot * self.size + offset) }
    }

    /// Copies `data` into buffer `slot` at `offset`.
    pub fn write(&self, slot: usize, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.size, "write past a buffer");
        // SAFETY: the destination lies inside the mapping (checked) and cannot overlap `data`,
        // which is Rust memory outside it.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.addr(slot, offset), data.len()) };
    }

    /// Appends `len` bytes of buffer `slot` from `offset` to `out`.
    pub fn read(&self, slot: usize, offset: usize, len: usize, out: &mut Vec<u8>) {
        assert!(offset + len <= self.size, "read past a buffer");
        out.reserve(len);
        let at = out.len();
        // SAFETY: the source lies inside the mapping (checked); `out` has room for `len` more
        // bytes and is set to its new length only after they are written.
        unsafe {
            ptr::copy_nonoverlapping(self.addr(slot, offset), out.as_mut_ptr().add(at), len);
            out.set_len(at + len);
        }
    }

    fn sge(&self, slot: usize, offset: usize, len: usize) -> sys::ibv_sge {
        assert!(offset + len <= self.size, "scatter entry past a buffer");
        sys::ibv_sge {
            addr: self.addr(slot, offset) as u64,
            length: len as u32,
            lkey: self.mr.as_ref().map_or(0, MemoryRegion::lkey),
        }
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        self.mr = None;
        // SAFETY: the mapping was made by `new` with this length and is unmapped once, after
        // its registration was dropped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// What a completion was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionKind {
    /// A send finished.
    Send,
    /// A receive filled a buffer.
    Recv,
    /// An RDMA READ landed.
    Read,
    /// Something else.
    Other(u32),
}

/// One work completion.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    /// The caller's id of the work request.
    pub wr_id: u64,
    /// Success, or the status text.
    pub status: Result<(), &'static str>,
    /// Its kind.
    pub kind: CompletionKind,
    /// Bytes received (receives).
    pub byte_len: u32,
    /// The local QP it belongs to.
    pub qp_num: u32,
    /// The sending QP (UD receives).
    pub src_qp: u32,
}

/// A completion queue with its completion channel (a descriptor to wait on).
pub struct CompletionQueue {
    channel: *mut sys::ibv_comp_channel,
    cq: *mut sys::ibv_cq,
    unacked: u32,
    /// The CQ will raise an event on its next completion (no event taken since the last arm).
    armed: bool,
    /// When the channel was last read.
    last_take: std::time::Instant,
    /// Events taken from the channel in all.
    events: u64,
    _dev: Arc<Device>,
}

/// While idle, the channel is still read this often: an event that raced a poll (its
/// completion already taken) would otherwise leave the descriptor readable, and the service
/// thread awake, until the next completion.
const IDLE_TAKE_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

// SAFETY: the CQ and channel may be used from any thread (one at a time: `&mut self`).
unsafe impl Send for CompletionQueue {}

impl CompletionQueue {
    /// A CQ of `depth` entries with a non-blocking channel, armed.
    pub fn new(dev: &Arc<Device>, depth: usize) -> Result<CompletionQueue, VerbsError> {
        // SAFETY: the context is open.
        let channel = unsafe { sys::ibv_create_comp_channel(dev.ctx) };
        if channel.is_null() {
            return Err(call("ibv_create_comp_channel")(io::Error::last_os_error()));
        }
        // SAFETY: the context and channel are valid.
        let cq = unsafe { sys::ibv_create_cq(dev.ctx, depth as i32, ptr::null_mut(), channel, 0) };
        if cq.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: created above, not used elsewhere.
            unsafe { sys::ibv_destroy_comp_channel(channel) };
            return Err(call("ibv_create_cq")(e));
        }
        let mut q = CompletionQueue {
            channel,
            cq,
            unacked: 0,
            armed: false,
            last_take: std::time::Instant::now(),
            events: 0,
            _dev: Arc::clone(dev),
        };
        // SAFETY: `channel` is valid; its fd belongs to it.
        let fd = unsafe { (*channel).fd };
        crate::sys::set_nonblocking(fd)
            .map_err(call("making the completion channel non-blocking"))?;
        q.arm()?;
        Ok(q)
    }

    /// The descriptor that becomes readable when a completion arrives while the CQ is armed.
    pub fn fd(&self) -> RawFd {
        // SAFETY: `channel` is valid for the queue's life.
        unsafe { (*self.channel).fd }
    }

    /// Events taken from the channel so far (times a completion woke us).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Asks for an event on the next completion.
    fn arm(&mut self) -> Result<(), VerbsError> {
        // SAFETY: `cq` is valid.
        check("ibv_req_notify_cq", unsafe {
            sys::ibv_req_notify_cq(self.cq, 0)
        })?;
        self.armed = true;
        Ok(())
    }

    /// Every completion waiting, into `out` (cleared first); leaves the CQ armed, so the
    /// descriptor wakes a sleeper on the next one. Idle calls make no system call (beyond one
    /// channel read per `IDLE_TAKE_EVERY`): the service thread calls this on every spin.
    pub fn drain(&mut self, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        out.clear();
        loop {
            let before = out.len();
            self.poll_more(out);
            if out.len() == before && self.armed {
                if self.last_take.elapsed() < IDLE_TAKE_EVERY || self.take_events() == 0 {
                    return Ok(());
                }
                // An event was pending: the CQ is disarmed, arm it and look again.
            } else {
                // Completions came: their event (if any) is on the channel; take it, re-arm,
                // then look again, since a completion between the last poll and the arm
                // raises no event.
                self.take_events();
            }
            self.arm()?;
        }
    }

    /// Consumes pending channel events (non-blocking); returns how many there were.
    fn take_events(&mut self) -> u32 {
        self.last_take = std::time::Instant::now();
        let mut n = 0;
        loop {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: the channel is valid and non-blocking; the out-pointers are valid.
            let r = unsafe { sys::ibv_get_cq_event(self.channel, &mut cq, &mut ctx) };
            if r != 0 {
                break;
            }
            n += 1;
        }
        if n > 0 {
            self.armed = false;
            self.events += u64::from(n);
        }
        self.unacked += n;
        if self.unacked >= 64 {
            // SAFETY: acknowledges events received on this CQ.
            unsafe { sys::ibv_ack_cq_events(self.cq, self.unacked) };
            self.unacked = 0;
        }
        n
    }

    /// Appends the completions waiting now to `out`.
    fn poll_more(&mut self, out: &mut Vec<Completion>) {
        // SAFETY: an all-zero ibv_wc is valid plain data.
        let mut wcs: [sys::ibv_wc; 32] = unsafe { std::mem::zeroed() };
        loop {
            let want = wcs.len() as i32;
            // SAFETY: `cq` is valid and `wcs` has room for `want` entries.
            let n = unsafe { sys::ibv_poll_cq(self.cq, want, wcs.as_mut_ptr()) };
            if n <= 0 {
                break;
            }
            for wc in &wcs[..n as usize] {
                let status = if wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS {
                    Ok(())
                } else {
                    // SAFETY: returns a static string for any status value.
                    let s = unsafe { CStr::from_ptr(sys::ibv_wc_status_str(wc.status)) };
                    Err(s.to_str().unwrap_or("unknown completion error"))
                };
                let kind = match wc.opcode {
                    sys::ibv_wc_opcode::IBV_WC_SEND => CompletionKind::Send,
                    sys::ibv_wc_opcode::IBV_WC_RECV => CompletionKind::Recv,
                    sys::ibv_wc_opcode::IBV_WC_RDMA_READ => CompletionKind::Read,
                    other => CompletionKind::Other(other),
                };
                out.push(Completion {
                    wr_id: wc.wr_id,
                    status,
                    kind,
                    byte_len: wc.byte_len,
                    qp_num: wc.qp_num,
                    src_qp: wc.src_qp,
                });
            }
            if n < want {
                break;
            }
        }
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: created by `new`; every QP using this CQ is dropped first (they hold no Arc to
        // it, so their owners must declare them before the CQ); events are acknowledged first.
        unsafe {
            if self.unacked > 0 {
                sys::ibv_ack_cq_events(self.cq, self.unacked);
            }
            sys::ibv_destroy_cq(self.cq);
            sys::ibv_destroy_comp_channel(self.channel);
        }
    }
}

/// A buffer named for a work request: `len` bytes of slot `slot` of `pool` from `offset`.
#[derive(Clone, Copy)]
pub struct Buf<'a> {
    /// The pool.
    pub pool: &'a BufferPool,
    /// The slot.
    pub slot: usize,
    /// Offset in the slot.
    pub offset: usize,
    /// Length.
    pub len: usize,
}

/// A send-queue work request.
pub enum SendOp<'a> {
    /// A two-sided send of `buf` (on UD: to `ah`, QP `qpn`, with `qkey`).
    Send {
        /// The bytes.
        buf: Buf<'a>,
        /// UD destination.
        ud: Option<(&'a AddressHandle, u32, u32)>,
    },
    /// A one-sided read of `buf.len` bytes at `remote_addr` (key `rkey`) into `buf`.
    Read {
        /// Where they land.
        buf: Buf<'a>,
        /// Address at the peer.
        remote_addr: u64,
        /// The peer's key for it.
        rkey: u32,
    },
}

/// A shared receive queue.
pub struct SharedReceiveQueue {
    srq: *mut sys::ibv_srq,
    _dev: Arc<Device>,
}

// SAFETY: an SRQ may be used from any thread (one at a time: `&mut self` for posting).
unsafe impl Send for SharedReceiveQueue {}

impl SharedReceiveQueue {
    /// An SRQ of `depth` receives.
    pub fn new(dev: &Arc<Device>, depth: usize) -> Result<SharedReceiveQueue, VerbsError> {
        let mut attr = sys::ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr: depth as u32,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: the PD is valid and `attr` initialised.
        let srq = unsafe { sys::ibv_create_srq(dev.pd, &mut attr) };
        if srq.is_null() {
            return Err(call("ibv_create_srq")(io::Error::last_os_error()));
        }
        Ok(SharedReceiveQueue {
            srq,
            _dev: Arc::clone(dev),
        })
    }

    /// Posts receives into `bufs` (ids `ids`), chained in one call.
    pub fn post_recv(&mut self, bufs: &[(u64, Buf<'_>)]) -> Result<(), VerbsError> {
        post_recv_chain(bufs, |wr, bad| {
            // SAFETY: `srq` is valid; `wr` is a well-formed chain (see post_recv_chain).
            unsafe { sys::ibv_post_srq_recv(self.srq, wr, bad) }
        })
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // SAFETY: created by `new`; the QPs using it are dropped before it.
        unsafe { sys::ibv_destroy_srq(self.srq) };
    }
}

fn post_recv_chain(
    bufs: &[(u64, Buf<'_>)],
    post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> i32,
) -> Result<(), VerbsError> {
    if bufs.is_empty() {
        return Ok(());
    }
    let mut sges: Vec<sys::ibv_sge> = bufs
        .iter()
        .map(|(_, b)| b.pool.sge(b.slot, b.offset, b.len))
        .collect();
    let mut wrs: Vec<sys::ibv_recv_wr> = bufs
        .iter()
        .zip(sges.iter_mut())
        .map(|((id, _), sge)| sys::ibv_recv_wr {
            wr_id: *id,
            next: ptr::null_mut(),
            sg_list: sge,
            num_sge: 1,
        })
        .collect();
    for i in 1..wrs.len() {
        let next: *mut sys::ibv_recv_wr = &mut wrs[i];
        wrs[i - 1].next = next;
    }
    let mut bad = ptr::null_mut();
    check("posting receives", post(wrs.as_mut_ptr(), &mut bad))
}

/// Where a peer's RC queue pair is: exchanged out of band before connecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The peer port's GID.
    pub gid: [u8; 16],
    /// Its queue pair number.
    pub qpn: u32,
    /// Its first packet sequence number.
    pub psn: u32,
}

/// The kind of queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
}

/// A queue pair.
pub struct QueuePair {
    qp: *mut sys::ibv_qp,
    dev: Arc<Device>,
}

// SAFETY: a QP may be used from any thread (one at a time: `&mut self` for posting).
unsafe impl Send for QueuePair {}

impl QueuePair {
    /// A QP of `kind` completing on `cq` (receives from `srq` when given), with room for
    /// `send_depth` sends and (without an SRQ) `recv_depth` receives.
    pub fn new(
        dev: &Arc<Device>,
        kind: QpType,
        cq: &CompletionQueue,
        srq: Option<&SharedReceiveQueue>,
        send_depth: usize,
        recv_depth: usize,
    ) -> Result<QueuePair, VerbsError> {
        let mut attr = sys::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq.cq,
            recv_cq: cq.cq,
            srq: srq.map_or(ptr::null_mut(), |s| s.srq),
            cap: sys::ibv_qp_cap {
                max_send_wr: send_depth as u32,
                max_recv_wr: if srq.is_some() { 0 } else { recv_depth as u32 },
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: match kind {
                QpType::Rc => sys::ibv_qp_type::IBV_QPT_RC,
                QpType::Ud => sys::ibv_qp_type::IBV_QPT_UD,
            },
            sq_sig_all: 0,
        };
        // SAFETY: the PD, CQ and SRQ are valid; `attr` is initialised.
        let qp = unsafe { sys::ibv_create_qp(dev.pd, &mut attr) };
        if qp.is_null() {
            return Err(call("ibv_create_qp")(io::Error::last_os_error()));
        }
        Ok(QueuePair {
            qp,
            dev: Arc::clone(dev),
        })
    }

    /// Its number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: `qp` is valid.
        unsafe { (*self.qp).qp_num }
    }

    fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: u32,
        what: &'static str,
    ) -> Result<(), VerbsError> {
        // SAFETY: `qp` is valid and `attr` initialised for the fields named in `mask`.
        check(what, unsafe {
            sys::ibv_modify_qp(self.qp, attr, mask as i32)
        })
    }

    fn zeroed_attr() -> sys::ibv_qp_attr {
        // SAFETY: ibv_qp_attr is plain data; all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    }

    /// RC: INIT -> RTR -> RTS towards `remote`, sending from PSN `my_psn`; remote reads allowed.
    pub fn connect_rc(&self, remote: &Endpoint, my_psn: u32, mtu: usize) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as m;
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.dev.port;
        a.qp_access_flags = sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            | sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        self.modify(
            &mut a,
            (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS).0,
            "RC QP to INIT",
        )?;
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = mtu_enum(mtu);
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 1; // 0.01 ms: receive buffers are reposted at once
        a.ah_attr = self.dev.ah_attr(&remote.gid);
        self.modify(
            &mut a,
            (m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER)
                .0,
            "RC QP to RTR",
        )?;
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        a.timeout = 14; // 4.096 us * 2^14 = 67 ms per try
        a.retry_cnt = 7;
        a.rnr_retry = 7; // infinite: a full receive queue is back-pressure, not an error
        a.sq_psn = my_psn;
        a.max_rd_atomic = 16;
        self.modify(
            &mut a,
            (m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC)
                .0,
            "RC QP to RTS",
        )
    }

    /// UD: INIT -> RTR -> RTS with `qkey`.
    pub fn ready_ud(&self, qkey: u32, psn: u32) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as m;
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.dev.port;
        a.qkey = qkey;
        self.modify(
            &mut a,
            (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_QKEY).0,
            "UD QP to INIT",
        )?;
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        self.modify(&mut a, m::IBV_QP_STATE.0, "UD QP to RTR")?;
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = psn;
        self.modify(
            &mut a,
            (m::IBV_QP_STATE | m::IBV_QP_SQ_PSN).0,
            "UD QP to RTS",
        )
    }

    /// Posts receives on this QP's own receive queue (UD), chained in one call.
    pub fn post_recv(&mut self, bufs: &[(u64, Buf<'_>)]) -> Result<(), VerbsError> {
        post_recv_chain(bufs, |wr, bad| {
            // SAFETY: `qp` is valid; `wr` is a well-formed chain.
            unsafe { sys::ibv_post_recv(self.qp, wr, bad) }
        })
    }

    /// Posts `ops` (ids given) as one chained list: one doorbell for the batch. Every request is
    /// signaled.
    pub fn post_send(&mut self, ops: &[(u64, SendOp<'_>)]) -> Result<(), VerbsError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<sys::ibv_sge> = ops
            .iter()
            .map(|(_, op)| match op {
                SendOp::Send { buf, .. } | SendOp::Read { buf, .. } => {
                    buf.pool.sge(buf.slot, buf.offset, buf.len)
                }
            })
            .collect();
        let mut wrs: Vec<sys::ibv_send_wr> = Vec::with_capacity(ops.len());
        for ((id, op), sge) in ops.iter().zip(sges.iter_mut()) {
            // SAFETY: ibv_send_wr is plain data (pointers and integers); zero is valid.
            let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
            wr.wr_id = *id;
            wr.sg_list = sge;
            wr.num_sge = 1;
            wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
            match op {
                SendOp::Send { ud, .. } => {
                    wr.opcode = sys::ibv_wr_opcode::IBV_WR_SEND;
                    if let Some((ah, qpn, qkey)) = ud {
                        wr.wr.ud = sys::ud_t {
                            ah: ah.ah,
                            remote_qpn: *qpn,
                            remote_qkey: *qkey,
                        };
                    }
                }
                SendOp::Read {
                    remote_addr, rkey, ..
                } => {
                    wr.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_READ;
                    wr.wr.rdma = sys::rdma_t {
                        remote_addr: *remote_addr,
                        rkey: *rkey,
                    };
                }
            }
            wrs.push(wr);
        }
        for i in 1..wrs.len() {
            let next: *mut sys::ibv_send_wr = &mut wrs[i];
            wrs[i - 1].next = next;
        }
        let mut bad = ptr::null_mut();
        // SAFETY: `qp` is valid; the chain and its scatter entries live until the call returns
        // (the device copies the descriptors); the buffers they name belong to pools the caller
        // keeps alive and untouched until the completions arrive.
        check("ibv_post_send", unsafe {
            sys::ibv_post_send(self.qp, wrs.as_mut_ptr(), &mut bad)
        })
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: created by `new`, destroyed once, before its CQ and SRQ (owners declare QPs
        // first).
        unsafe { sys::ibv_destroy_qp(self.qp) };
    }
}

fn mtu_enum(bytes: usize) -> sys::ibv_mtu::Type {
    match bytes {
        ..=256 => sys::ibv_mtu::IBV_MTU_256,
        257..=512 => sys::ibv_mtu::IBV_MTU_512,
        513..=1024 => sys::ibv_mtu::IBV_MTU_1024,
        1025..=2048 => sys::ibv_mtu::IBV_MTU_2048,
        _ => sys::ibv_mtu::IBV_MTU_4096,
    }
}

impl Device {
    fn ah_attr(&self, gid: &[u8; 16]) -> sys::ibv_ah_attr {
        sys::ibv_ah_attr {
            grh: sys::ibv_global_route {
                dgid: sys::ibv_gid { raw: *gid },
                flow_label: 0,
                sgid_index: self.gid_index,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: self.port,
        }
    }
}

/// An address handle: the route to one peer port, for UD sends.
pub struct AddressHandle {
    ah: *mut sys::ibv_ah,
    _dev: Arc<Device>,
}

// SAFETY: an AH may be used and freed from any thread.
unsafe impl Send for AddressHandle {}

impl AddressHandle {
    /// The route to the port with `gid`.
    pub fn new(dev: &Arc<Device>, gid: &[u8; 16]) -> Result<AddressHandle, VerbsError> {
        let mut attr = dev.ah_attr(gid);
        // SAFETY: the PD is valid and `attr` initialised.
        let ah = unsafe { sys::ibv_create_ah(dev.pd, &mut attr) };
        if ah.is_null() {
            return Err(call("ibv_create_ah")(io::Error::last_os_error()));
        }
        Ok(AddressHandle {
            ah,
            _dev: Arc::clone(dev),
        })
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: created by `new`, destroyed once, after the sends using it completed.
        unsafe { sys::ibv_destroy_ah(self.ah) };
    }
}
