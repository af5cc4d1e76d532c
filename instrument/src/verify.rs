//! Checking PC tables against the machine code (iced-x86).
