//! Sets of logical CPU ids in the kernel's list form ("0-2,4"), as cpusets, sysfs and
//! upstream's `cpu_manager_state` write them.

use std::collections::BTreeSet;
use std::fmt;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CpuSetError {
    #[error("invalid CPU id {0:?}")]
    Element(String),
    #[error("invalid range {0:?} (the first CPU is above the last)")]
    Range(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    pub fn new() -> Self {
        CpuSet::default()
    }

    /// "0-3,8"; an empty text is the empty set.
    pub fn parse(text: &str) -> Result<Self, CpuSetError> {
        let mut set = BTreeSet::new();
        for part in text.trim().split(',').map(str::trim) {
            if part.is_empty() {
                continue;
            }
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let id = |s: &str| {
                s.trim()
                    .parse::<u32>()
                    .map_err(|_| CpuSetError::Element(part.to_string()))
            };
            let (lo, hi) = (id(lo)?, id(hi)?);
            if lo > hi {
                return Err(CpuSetError::Range(part.to_string()));
            }
            set.extend(lo..=hi);
        }
        Ok(CpuSet(set))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        CpuSet(iter.into_iter().collect())
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids = self.0.iter().copied().peekable();
        let mut first = true;
        while let Some(lo) = ids.next() {
            let mut hi = lo;
            while ids.peek() == Some(&(hi + 1)) {
                hi += 1;
                ids.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_and_write_in_the_kernel_form() {
        for (text, shown) in [
            ("", ""),
            ("0", "0"),
            ("0-1", "0-1"),
            ("3,1,2", "1-3"),
            ("0-2,4,6-7", "0-2,4,6-7"),
            (" 5 , 0-1 ", "0-1,5"),
        ] {
            assert_eq!(CpuSet::parse(text).unwrap().to_string(), shown, "{text:?}");
        }
        assert_eq!(CpuSet::parse("3-1"), Err(CpuSetError::Range("3-1".into())));
        assert_eq!(CpuSet::parse("a"), Err(CpuSetError::Element("a".into())));
        assert_eq!(CpuSet::parse("1-"), Err(CpuSetError::Element("1-".into())));
    }
}
