//! The initramfs archive: cpio in the kernel's "newc" format
//! (`Documentation/driver-api/early-userspace/buffer-format.rst`), written
//! here so that building a VM needs no `cpio` tool on the host.

use std::collections::BTreeSet;
use std::io::{self, Write};

/// Regular files and directories of an initramfs, written in order with
/// every parent directory before its entries.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    written: usize,
    next_inode: u32,
    directories: BTreeSet<String>,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            written: 0,
            next_inode: 1,
            directories: BTreeSet::new(),
        }
    }

    /// Adds a file at `path` (absolute in the guest, "/bin/busybox") with
    /// permission bits `mode` (0o755), creating its parent directories.
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        let name = relative(path)?;
        self.parents(&name)?;
        self.entry(&name, 0o100_000 | (mode & 0o7777), data)
    }

    /// Adds an empty directory (and its parents).
    pub fn directory(&mut self, path: &str) -> io::Result<()> {
        let name = relative(path)?;
        self.parents(&name)?;
        self.ensure_directory(&name)
    }

    /// Writes the trailer; the archive is complete.
    pub fn finish(mut self) -> io::Result<W> {
        self.entry("TRAILER!!!", 0, &[])?;
        Ok(self.out)
    }

    fn parents(&mut self, name: &str) -> io::Result<()> {
        let mut prefix = String::new();
        let parts: Vec<&str> = name.split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            self.ensure_directory(&prefix.clone())?;
        }
        Ok(())
    }

    fn ensure_directory(&mut self, name: &str) -> io::Result<()> {
        if self.directories.insert(name.to_owned()) {
            self.entry(name, 0o040_755, &[])?;
        }
        Ok(())
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        let size = u32::try_from(data.len())
            .map_err(|_| io::Error::other(format!("{name}: over 4 GiB, too large for cpio")))?;
        let name_size = u32::try_from(name.len() + 1)
            .map_err(|_| io::Error::other("file name too long for cpio"))?;
        let inode = self.next_inode;
        self.next_inode += 1;
        let links = if mode & 0o040_000 != 0 { 2 } else { 1 };
        // magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
        // devminor, rdevmajor, rdevminor, namesize, check.
        let header = format!(
            "070701{inode:08x}{mode:08x}{:08x}{:08x}{links:08x}{:08x}{size:08x}{:08x}{:08x}{:08x}{:08x}{name_size:08x}{:08x}",
            0, 0, 0, 0, 0, 0, 0, 0
        );
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len();
        Ok(())
    }

    /// Headers and file data start on 4-byte boundaries.
    fn pad(&mut self) -> io::Result<()> {
        let padding = (4 - self.written % 4) % 4;
        self.put(&[0; 3][..padding])
    }
}

/// "/bin/busybox" → "bin/busybox"; refuses empty and `..` components.
fn relative(path: &str) -> io::Result<String> {
    let trimmed = path.trim_start_matches('/');
    let bad = trimmed.is_empty()
        || trimmed
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        return Err(io::Error::other(format!(
            "{path:?} is not a plain absolute path"
        )));
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of every header, as the kernel's unpacker reads them.
    fn entries(archive: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut found = Vec::new();
        let mut at = 0;
        let field = |at: usize, index: usize| {
            let start = at + 6 + index * 8;
            u32::from_str_radix(std::str::from_utf8(&archive[start..start + 8]).unwrap(), 16)
                .unwrap()
        };
        loop {
            assert_eq!(&archive[at..at + 6], b"070701", "magic at {at}");
            let mode = field(at, 1);
            let size = field(at, 6) as usize;
            let name_size = field(at, 11) as usize;
            let name_start = at + 110;
            let name = String::from_utf8(archive[name_start..name_start + name_size - 1].to_vec())
                .unwrap();
            let data_start = (name_start + name_size).next_multiple_of(4);
            let data = archive[data_start..data_start + size].to_vec();
            at = (data_start + size).next_multiple_of(4);
            if name == "TRAILER!!!" {
                assert_eq!(at, archive.len(), "nothing after the trailer");
                return found;
            }
            found.push((name, mode, data));
        }
    }

    #[test]
    fn files_come_after_their_directories_and_are_aligned() {
        let mut writer = Writer::new(Vec::new());
        writer.file("/bin/busybox", 0o755, b"ELF!!").unwrap();
        writer.file("/bin/sh2", 0o755, b"x").unwrap();
        writer.directory("/proc").unwrap();
        writer.file("/lib/modules/a.ko", 0o644, &[7; 9]).unwrap();
        let archive = writer.finish().unwrap();
        let listed: Vec<(String, u32)> = entries(&archive)
            .into_iter()
            .map(|(name, mode, _)| (name, mode))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("bin".to_owned(), 0o040_755),
                ("bin/busybox".to_owned(), 0o100_755),
                ("bin/sh2".to_owned(), 0o100_755),
                ("proc".to_owned(), 0o040_755),
                ("lib".to_owned(), 0o040_755),
                ("lib/modules".to_owned(), 0o040_755),
                ("lib/modules/a.ko".to_owned(), 0o100_644),
            ]
        );
        let data = entries(&archive);
        assert_eq!(data[1].2, b"ELF!!");
        assert_eq!(data[6].2, vec![7; 9]);
    }

    #[test]
    fn paths_that_could_escape_the_root_are_refused() {
        let mut writer = Writer::new(Vec::new());
        assert!(writer.file("/../etc/passwd", 0o644, b"").is_err());
        assert!(writer.file("/", 0o644, b"").is_err());
        assert!(writer.file("/a//b", 0o644, b"").is_err());
    }
}
