//! The mount table (`/proc/self/mountinfo`) read line by line: the one
//! parser the scans (which mounts a walk may not enter) and the runtime's
//! cgroup lookup (where cgroup v2 is mounted) share.
//!
//! # References
//! - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html)

/// One line of a mountinfo table: the fields this workspace reads.
pub struct MountLine<'a> {
    /// The mount's id (field 1).
    pub id: &'a [u8],
    /// Its parent mount's id (field 2).
    pub parent: &'a [u8],
    /// The directory of its filesystem it shows (field 4), escaped.
    pub root: &'a [u8],
    /// Its mount point (field 5), escaped.
    pub point: &'a [u8],
    /// Its filesystem type (the field after the `-` separator).
    pub fstype: Option<&'a [u8]>,
}

/// The lines of a mountinfo table (a line without a mount point is passed
/// over).
///
/// # References
/// - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html)
pub fn mount_lines(table: &[u8]) -> impl Iterator<Item = MountLine<'_>> {
    table.split(|b| *b == b'\n').filter_map(|line| {
        let f: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
        let point = f.get(4).filter(|p| !p.is_empty())?;
        let fstype = f.iter().skip(6).position(|x| *x == b"-").and_then(|i| f.get(6 + i + 1)).copied();
        Some(MountLine { id: f[0], parent: f[1], root: f[3], point, fstype })
    })
}

/// Undoes mountinfo's `\ooo` escapes (space, tab, newline, backslash).
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal =
            field.get(i + 1..i + 4).filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}
