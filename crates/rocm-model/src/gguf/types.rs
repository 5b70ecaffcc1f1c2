//! ggml tensor types: ids, names, block sizes and byte sizes.
//!
//! Every type ggml defines is listed, not only those rocmforge decodes, so that the size of any
//! tensor can be checked against the file and an error can name the type it refuses. The ids
//! and sizes are those of `enum ggml_type` and ggml's type traits (`blck_size`, `type_size`);
//! `QK_K` = 256 is the super-block of the k-quants and i-quants.

use std::fmt;

/// What a ggml type id stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeId {
    /// A type whose layout is known.
    Known(GgmlType),
    /// An id ggml once used and has removed from GGUF files (`Q4_2`, the repacked `Q4_0_4_4`,
    /// ...): its name is known, its layout is not defined for GGUF.
    Removed(&'static str),
    /// An id ggml has never defined (or one newer than this table).
    Unknown,
}

impl TypeId {
    pub fn from_u32(id: u32) -> TypeId {
        if let Some(t) = GgmlType::from_id(id) {
            return TypeId::Known(t);
        }
        match id {
            4 => TypeId::Removed("Q4_2"),
            5 => TypeId::Removed("Q4_3"),
            31 => TypeId::Removed("Q4_0_4_4"),
            32 => TypeId::Removed("Q4_0_4_8"),
            33 => TypeId::Removed("Q4_0_8_8"),
            36 => TypeId::Removed("IQ4_NL_4_4"),
            37 => TypeId::Removed("IQ4_NL_4_8"),
            38 => TypeId::Removed("IQ4_NL_8_8"),
            _ => TypeId::Unknown,
        }
    }
}

macro_rules! ggml_types {
    ($($variant:ident = $id:literal, $name:literal, $block:expr, $size:expr;)*) => {
        /// A ggml tensor type with a known layout.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum GgmlType {
            $($variant = $id,)*
        }

        impl GgmlType {
            /// Every type with a known layout, in id order.
            pub const ALL: &'static [GgmlType] = &[$(GgmlType::$variant,)*];

            /// The type with this id, if its layout is known.
            pub const fn from_id(id: u32) -> Option<GgmlType> {
                match id {
                    $($id => Some(GgmlType::$variant),)*
                    _ => None,
                }
            }

            /// ggml's name for the type (`Q8_0`, `MXFP4`, ...).
            pub const fn name(self) -> &'static str {
                match self {
                    $(GgmlType::$variant => $name,)*
                }
            }

            /// Elements per block (1 for plain types).
            pub const fn block_size(self) -> u64 {
                match self {
                    $(GgmlType::$variant => $block,)*
                }
            }

            /// Bytes per block.
            pub const fn type_size(self) -> u64 {
                match self {
                    $(GgmlType::$variant => $size,)*
                }
            }
        }
    };
}

/// ggml's k-quant super-block.
const QK_K: u64 = 256;

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 2 + 16;
    Q4_1 = 3, "Q4_1", 32, 2 + 2 + 16;
    Q5_0 = 6, "Q5_0", 32, 2 + 4 + 16;
    Q5_1 = 7, "Q5_1", 32, 2 + 2 + 4 + 16;
    Q8_0 = 8, "Q8_0", 32, 2 + 32;
    Q8_1 = 9, "Q8_1", 32, 4 + 4 + 32;
    Q2_K = 10, "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4;
    Q3_K = 11, "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12;
    Q4_K = 12, "Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12;
    Q5_K = 13, "Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12;
    Q6_K = 14, "Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16;
    Q8_K = 15, "Q8_K", QK_K, 4 + QK_K + QK_K / 8;
    IQ2_XXS = 16, "IQ2_XXS", QK_K, 2 + QK_K / 4;
    IQ2_XS = 17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32;
    IQ3_XXS = 18, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8;
    IQ1_S = 19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16;
    IQ4_NL = 20, "IQ4_NL", 32, 2 + 16;
    IQ3_S = 21, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4;
    IQ2_S = 22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16;
    IQ4_XS = 23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", QK_K, 2 + 4 * 13;
    TQ2_0 = 35, "TQ2_0", QK_K, 2 + 64;
    MXFP4 = 39, "MXFP4", 32, 1 + 16;
    NVFP4 = 40, "NVFP4", 64, 4 + 32;
    Q1_0 = 41, "Q1_0", 128, 2 + 16;
}

impl GgmlType {
    /// The numeric id stored in GGUF tensor infos.
    pub const fn id(self) -> u32 {
        self as u32
    }

    /// Whether rocmforge can decode this type to f32 ([`crate::gguf::GgufFile::to_f32`]).
    pub const fn is_decodable(self) -> bool {
        matches!(
            self,
            GgmlType::F32
                | GgmlType::F16
                | GgmlType::BF16
                | GgmlType::Q8_0
                | GgmlType::Q4_0
                | GgmlType::MXFP4
                | GgmlType::Q4_K
                | GgmlType::Q5_K
                | GgmlType::Q6_K
        )
    }

    /// Whether elements are grouped in blocks of more than one.
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_sizes_match_ggml() {
        for &t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(TypeId::from_u32(t.id()), TypeId::Known(t));
            assert!(t.block_size() >= 1 && t.type_size() >= 1, "{t}");
        }
        // A few sizes as ggml states them (sizeof(block_*)).
        let expect = [
            (GgmlType::Q4_K, 144),
            (GgmlType::Q6_K, 210),
            (GgmlType::Q2_K, 84),
            (GgmlType::Q3_K, 110),
            (GgmlType::Q5_K, 176),
            (GgmlType::Q8_K, 292),
            (GgmlType::IQ2_XXS, 66),
            (GgmlType::IQ4_XS, 136),
            (GgmlType::IQ1_M, 56),
            (GgmlType::TQ1_0, 54),
            (GgmlType::MXFP4, 17),
        ];
        for (t, size) in expect {
            assert_eq!(t.type_size(), size, "{t}");
        }
        assert_eq!(GgmlType::ALL.len(), 34);
    }

    #[test]
    fn removed_and_unknown_ids_are_told_apart() {
        assert_eq!(TypeId::from_u32(31), TypeId::Removed("Q4_0_4_4"));
        assert_eq!(TypeId::from_u32(4), TypeId::Removed("Q4_2"));
        assert_eq!(TypeId::from_u32(42), TypeId::Unknown);
        assert_eq!(TypeId::from_u32(u32::MAX), TypeId::Unknown);
    }
}
