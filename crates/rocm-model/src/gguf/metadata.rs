//! The metadata key/value table, in file order, with lookup by key.

use std::collections::HashMap;

use super::value::Value;

/// Metadata entries in the order the file lists them; keys are unique (the reader refuses
/// duplicates, and so does the writer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub fn new() -> Self {
        Metadata::default()
    }

    /// Adds an entry; gives it back if the key is already present.
    pub(crate) fn insert(&mut self, key: String, value: Value) -> Result<(), (String, Value)> {
        if self.index.contains_key(&key) {
            return Err((key, value));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    /// Replaces the value of `key`, or appends it.
    pub(crate) fn set(&mut self, key: &str, value: Value) {
        match self.index.get(key) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                let _ = self.insert(key.to_string(), value);
            }
        }
    }

    pub(crate) fn with_capacity(n: usize) -> Self {
        Metadata { entries: Vec::with_capacity(n), index: HashMap::with_capacity(n) }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// A string value, if `key` holds one.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// An integer value of any width that is non-negative.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
